# aggregate_bench (a benchmark, not a test): the proxy's fold time per aggregation mode for
# the Qwen2.5-0.5B LoRA shape.
add_executable(aggregate_bench ${CMAKE_SOURCE_DIR}/bench/aggregate_bench.cpp)
target_link_libraries(aggregate_bench PRIVATE brl_launch)
