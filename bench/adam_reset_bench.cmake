# adam_reset_bench (a benchmark, not a test): AdamW state kept, reset or momentum-reset every K
# steps on the chaos recipe, in one process (issue 21).
add_executable(adam_reset_bench ${CMAKE_SOURCE_DIR}/bench/adam_reset_bench.cpp)
target_link_libraries(adam_reset_bench PRIVATE brl_launch)
target_compile_definitions(adam_reset_bench PRIVATE BRL_SOURCE_DIR="${CMAKE_SOURCE_DIR}" BRL_BINARY_DIR="${CMAKE_BINARY_DIR}"
  BRL_PYTHON="${BRL_PYTHON}" BRL_TESTDATA_DIR="${BRL_TESTDATA_DIR}" BRL_EXE="$<TARGET_FILE:bucketrl>")
