# tool_loop_bench (a benchmark, not a test): the host work of a round of tool calling.
add_executable(tool_loop_bench ${CMAKE_SOURCE_DIR}/bench/tool_loop_bench.cpp)
target_link_libraries(tool_loop_bench PRIVATE brl_grpo)
