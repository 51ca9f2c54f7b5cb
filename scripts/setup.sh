#!/usr/bin/env bash
# Set up a fresh Debian 12 machine and build bucketrl in Release.
#   scripts/setup.sh           runtime + build dependencies, then build/bucketrl
#   scripts/setup.sh --test    also what the test suite needs (S3 server, oracles), and build
#                              everything (tests, benchmarks)
#   scripts/setup.sh --no-build  the dependencies only
set -euo pipefail
cd "$(dirname "$0")/.."

WITH_TESTS=0 BUILD=1
for a in "$@"; do
  case $a in
    --test) WITH_TESTS=1 ;;
    --no-build) BUILD=0 ;;  # dependencies only (the container build caches them in a layer)
    *) echo "setup: unknown argument $a (--test, --no-build)" >&2; exit 2 ;;
  esac
done

SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"

pkgs=(
  build-essential cmake pkg-config ccache git
  # The virtual environment that holds libtorch (PyPI's torch wheel, below).
  python3 python3-venv
  libtcmalloc-minimal4
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libpcre2-dev libzstd-dev
  libcurl4-openssl-dev libssl-dev libtomlplusplus-dev libicu-dev
)
test_pkgs=(
  libgtest-dev
  # The real S3 server for tests (Ceph RGW), see scripts/s3-server.sh.
  radosgw ceph-mon ceph-osd
  # `ip netns` and veth links: the several-hosts test (tests/launch/netns_s3_test.cpp).
  iproute2
  # The dashboard's browser test (tests/launch/dashboard_slow_test.cpp): headless Chromium.
  chromium
  # The sanitizer and fuzz builds (scripts/sanitize.sh, scripts/fuzz.sh): clang with its
  # sanitizer and libFuzzer runtimes (only recommended by clang, so named), llvm-symbolizer.
  clang libclang-rt-14-dev llvm-14
  # The layout check (scripts/format.sh --check, first in CI).
  clang-format-14
)
want=("${pkgs[@]}")
[[ $WITH_TESTS == 1 ]] && want+=("${test_pkgs[@]}")

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

# libtorch: PyPI's torch wheel (the CUDA build; it runs on CPU too) in .venv, one pinned
# version (requirements/torch.txt). With --test also the oracles the tests compare against:
# transformers, PEFT, TRL, tokenizers (requirements/oracles.txt).
VENV=${BRL_VENV:-.venv}
if [[ ! -x $VENV/bin/python ]]; then
  python3 -m venv "$VENV"
fi
reqs=(-r requirements/torch.txt)
[[ $WITH_TESTS == 1 ]] && reqs+=(-r requirements/oracles.txt)
# pip answers in seconds when everything is already there.
"$VENV/bin/pip" install -q "${reqs[@]}"

if [[ $WITH_TESTS == 1 && -x scripts/oracles.sh ]]; then
  scripts/oracles.sh
fi

# libtorch's CMake config needs a CUDA toolkit (nvcc, the CUDA headers) even to build for the
# CPU. Where none is installed (a laptop, the container build), NVIDIA's own from PyPI, pinned
# to the wheel's CUDA (requirements/cuda-toolkit.txt), completes the wheel's CUDA folder.
cuda_args=()
if ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  "$VENV/bin/pip" install -q -r requirements/cuda-toolkit.txt
  cuda=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia/cu13
  # The wheels ship versioned libraries only; CMake's FindCUDA looks for libcudart.so in lib64.
  [[ -e $cuda/lib64 ]] || ln -s lib "$cuda/lib64"
  for f in "$cuda"/lib/*.so.*; do
    [[ -e ${f%%.so.*}.so ]] || ln -s "$(basename "$f")" "${f%%.so.*}.so"
  done
  export PATH=$cuda/bin:$PATH
  cuda_args=(-DCUDA_TOOLKIT_ROOT_DIR="$cuda" -DCUDAToolkit_ROOT="$cuda")
  echo "setup: no CUDA toolkit on this machine; using PyPI's in $cuda"
fi
[[ $BUILD == 1 ]] || exit 0

BUILD_DIR=${BUILD_DIR:-build}
# ccache keys on paths relative to the checkout, so clones in other folders share the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DBRL_PYTHON="$(realpath "$VENV")/bin/python" "${cuda_args[@]}" >/dev/null
# The main job needs the executable only; the tests, fuzzers' seeds and benchmarks are built by
# the test command (--test), so the demo starts after a third of the full build.
if [[ $WITH_TESTS == 1 ]]; then
  cmake --build "$BUILD_DIR" -j"$(nproc)"
  echo "setup: built $BUILD_DIR/bucketrl and the tests"
else
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target bucketrl
  echo "setup: built $BUILD_DIR/bucketrl"
fi
