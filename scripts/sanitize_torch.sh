#!/usr/bin/env bash
# The torch areas (model, generate, lora, grpo, worker, launch: the worker, the evaluator, the
# binary) under AddressSanitizer + UndefinedBehaviorSanitizer (+ LeakSanitizer): our code
# instrumented, linked against the uninstrumented libtorch of .venv, built with the system's
# GCC (the compiler of the main build) in build-san-torch/. Runs the quick tests (the torch
# areas' and the rest) and a short chaos run of the sanitized executable. Every process writes its
# reports to build-san-torch/san-reports/ (a proxy or worker the tests start, or one a chaos
# kill would otherwise hide behind its restart): any report there fails the run. Not in CI:
# the build alone takes longer than CI's whole run (BENCHMARKS.md, "Sanitizers over the torch
# areas", has the last run and its times).
#   scripts/sanitize_torch.sh                   build, quick tests, 60 s chaos
#   scripts/sanitize_torch.sh --chaos 300       a longer chaos run
#   scripts/sanitize_torch.sh -R llama_test     any ctest arguments instead of the quick tests
# Across the libtorch boundary:
#  - Container-overflow checks are off, and that is libstdc++'s default: its std::vector
#    annotations exist only under _GLIBCXX_SANITIZE_VECTOR, and they would misfire here, since
#    a vector grown by libtorch's uninstrumented copy of inline code (the sizes and tensor
#    lists we hand it) leaves stale annotations that our instrumented code then trips on.
#  - UBSan's vptr check stays on (libtorch keeps its RTTI); reports are fatal.
#  - LeakSanitizer reports only memory nothing can reach at exit; libtorch's process-wide
#    registries stay reachable, so no suppressions are needed (any leak fails).
#  - No tcmalloc (CMakeLists leaves it out under BRL_SANITIZE: ASan brings its own allocator).
#  - crash_report_test skips: a sanitized bucketrl leaves fatal signals to the sanitizer's own
#    report rather than installing its crash handler (src/cli/crash.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${SAN_TORCH_BUILD_DIR:-build-san-torch}
CHAOS=60
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --chaos) CHAOS=$2; shift 2 ;;
    -h|--help) sed -n "2,26p" "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}

if [[ ! -f "$DIR/CMakeCache.txt" ]]; then
  # -O1 and line tables: what the reports need, at the least compile time; no NDEBUG.
  cmake -S . -B "$DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DBRL_SANITIZE=ON >/dev/null
fi
# Everything (the quick tests include the benchmarks' smoke runs, and the chaos test).
start=$(date +%s)
cmake --build "$DIR" -j"${BRL_JOBS:-2}"
echo "sanitize_torch: built in $(( $(date +%s) - start )) s"

reports="$PWD/$DIR/san-reports"
rm -rf "$reports" && mkdir -p "$reports"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:log_path=$reports/asan}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan}
check_reports() {
  if compgen -G "$reports/*" >/dev/null; then
    echo "sanitize_torch: sanitizer reports in $reports:" >&2
    head -n 60 "$reports"/* >&2
    exit 1
  fi
}
trap check_reports EXIT
cd "$DIR"
if [[ ${#args[@]} -eq 0 ]]; then
  args=(-L quick)
fi
# Under ASan a test runs 2-4x slower than in the release build: the timeouts grow to match.
ctest --output-on-failure --timeout 3000 -j"${BRL_JOBS:-2}" -E '^zz_' "${args[@]}"
cd ..
if [[ $CHAOS -gt 0 ]]; then
  BUILD_DIR=$DIR scripts/chaos.sh --seconds "$CHAOS"
fi
