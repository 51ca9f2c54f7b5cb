# train_step_bench (a benchmark, not a test): GRPO+LoRA training-step throughput and the
# fraction of the GEMM ceiling; bench/train_step_compare.sh puts it beside PyTorch.
add_executable(train_step_bench ${CMAKE_SOURCE_DIR}/bench/train_step_bench.cpp)
target_link_libraries(train_step_bench PRIVATE brl_grpo)
if(TCMALLOC_LIB)
  target_link_libraries(train_step_bench PRIVATE ${TCMALLOC_LIB})
endif()
