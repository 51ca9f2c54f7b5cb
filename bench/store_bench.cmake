# store_bench (a benchmark, not a test): put/get throughput of one store URL.
add_executable(store_bench ${CMAKE_SOURCE_DIR}/bench/store_bench.cpp)
target_link_libraries(store_bench PRIVATE brl_store)
