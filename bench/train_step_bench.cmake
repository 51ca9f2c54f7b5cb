# train_step_bench (a benchmark, not a test): GRPO+LoRA training-step throughput and the
# fraction of the GEMM ceiling; bench/train_step_compare.sh puts it beside PyTorch.
add_executable(train_step_bench ${CMAKE_SOURCE_DIR}/bench/train_step_bench.cpp)
target_link_libraries(train_step_bench PRIVATE brl_grpo)
# A smoke run in the suite (the demo shape, one step) so the benchmark cannot rot unnoticed.
add_test(NAME train_step_bench_smoke COMMAND train_step_bench --shape demo --repeats 1 --threads 1 --json)
set_tests_properties(train_step_bench_smoke PROPERTIES LABELS "quick" PASS_REGULAR_EXPRESSION "\"tokens_per_second\": [0-9]")
