# linear_bench (a benchmark, not a test): few-row F32 linear, at::linear vs skinny_linear.
add_executable(linear_bench ${CMAKE_SOURCE_DIR}/bench/linear_bench.cpp)
target_link_libraries(linear_bench PRIVATE brl_model)
