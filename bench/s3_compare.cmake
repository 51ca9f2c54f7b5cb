# s3_compare_bench: put/get throughput of our S3 client (bench/s3_compare.sh runs it beside boto3).
add_executable(s3_compare_bench ${CMAKE_SOURCE_DIR}/bench/s3_compare_bench.cpp)
target_link_libraries(s3_compare_bench PRIVATE brl_store)
