# generate_bench (a benchmark, not a test): prompt / decode throughput on a named shape.
add_executable(generate_bench ${CMAKE_SOURCE_DIR}/bench/generate_bench.cpp)
target_link_libraries(generate_bench PRIVATE brl_generate brl_lora)
