# Sourced by scripts/sanitize.sh and scripts/fuzz.sh: the one sanitizer build they share.
# build-san/: clang, ASan + UBSan (-fno-sanitize-recover: any report fails), libFuzzer
# coverage, and no libtorch (BRL_WITH_TORCH=OFF): the torch-free libraries (util store
# tokenizer tasks config codec protocol obs proxy), their unit tests and the fuzz targets in fuzz/.
#   san_build TARGET...   configure once, then build the targets (-j from BRL_JOBS, default 2)
SAN_BUILD_DIR=${SAN_BUILD_DIR:-build-san}
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
# With debug info ccache keys on the working directory too; line tables are all the reports
# need, so other checkouts may share the cache.
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
# Reports fail the process and print symbolized stacks; leaks are checked at exit.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

san_build() {
  if [[ ! -f "$SAN_BUILD_DIR/CMakeCache.txt" ]]; then
    # -O1 and line tables: the usual sanitizer/fuzzer build (~10% less compile time than
    # -O2 -g); no NDEBUG, so assertions (nlohmann's included) stay on.
    cmake -S . -B "$SAN_BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
      -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DBRL_WITH_TORCH=OFF -DBRL_FUZZ=ON >/dev/null
  fi
  cmake --build "$SAN_BUILD_DIR" -j"${BRL_JOBS:-2}" --target "$@"
}
