# codec_bench (a benchmark, not a test): update payload bytes and encode/decode time per codec, and
# the bytes of a published version (float32 or bfloat16).
add_executable(codec_bench ${CMAKE_SOURCE_DIR}/bench/codec_bench.cpp)
target_link_libraries(codec_bench PRIVATE brl_codec brl_protocol)
