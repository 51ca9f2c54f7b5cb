# http_bench_ours / http_bench_httplib (benchmarks, not tests): the same routes served by the
# proxy's HTTP server and by Debian's cpp-httplib (libcpp-httplib-dev, when installed), for
# bench/http_compare.py.
add_executable(http_bench_ours ${CMAKE_SOURCE_DIR}/bench/http_bench_server.cpp)
target_link_libraries(http_bench_ours PRIVATE brl_obs)
pkg_check_modules(HTTPLIB QUIET cpp-httplib)
if(HTTPLIB_FOUND)
  add_executable(http_bench_httplib ${CMAKE_SOURCE_DIR}/bench/http_bench_server.cpp)
  target_compile_definitions(http_bench_httplib PRIVATE BRL_HTTPLIB)
  target_include_directories(http_bench_httplib PRIVATE ${HTTPLIB_INCLUDE_DIRS})
  target_link_libraries(http_bench_httplib PRIVATE ${HTTPLIB_LINK_LIBRARIES} pthread)
endif()
