#!/usr/bin/env bash
# Set up a fresh Debian 12 machine and build bucketrl in Release.
#   scripts/setup.sh           runtime + build dependencies, then build into build/
#   scripts/setup.sh --test    also what the test suite needs (S3 server, oracles)
set -euo pipefail
cd "$(dirname "$0")/.."

WITH_TESTS=0
[[ "${1:-}" == "--test" ]] && WITH_TESTS=1

SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"

pkgs=(
  build-essential cmake pkg-config ccache git
  libtorch-dev
  # Without OpenBLAS libtorch here runs matrix products on the reference BLAS, 40x slower.
  libopenblas0-pthread
  libtcmalloc-minimal4
  nlohmann-json3-dev libcli11-dev libspdlog-dev libpcre2-dev libzstd-dev
  libcurl4-openssl-dev libssl-dev libtomlplusplus-dev libicu-dev
)
test_pkgs=(
  libgtest-dev
  # The real S3 server for tests (Ceph RGW), see scripts/s3-server.sh.
  radosgw ceph-mon ceph-osd
  # `ip netns` and veth links: the several-hosts test (tests/async/netns_s3_test.cpp).
  iproute2
  # Oracles: python for GGUF conversion (node, for HF's tokenizer binding and llama.cpp,
  # comes with these machines; Debian's nodejs is only installed where none exists).
  python3 python3-numpy
  # The dashboard's browser test (tests/async/dashboard_slow_test.cpp): headless Chromium.
  chromium
  # The sanitizer and fuzz builds (scripts/sanitize.sh, scripts/fuzz.sh): clang with its
  # sanitizer and libFuzzer runtimes (only recommended by clang, so named), llvm-symbolizer.
  clang libclang-rt-14-dev llvm-14
)
want=("${pkgs[@]}")
[[ $WITH_TESTS == 1 ]] && want+=("${test_pkgs[@]}")
[[ $WITH_TESTS == 1 ]] && ! command -v node >/dev/null && want+=(nodejs npm)

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

# Debian's alternatives must point libblas.so.3 at OpenBLAS, not the reference BLAS.
if command -v update-alternatives >/dev/null; then
  cur=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | awk '/^Value:/{print $2}')
  if [[ -n "$cur" && "$cur" != *openblas* ]]; then
    ob=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu | awk '/^Alternative:/{print $2}' | grep openblas | head -1)
    [[ -n "$ob" ]] && $SUDO update-alternatives --set libblas.so.3-x86_64-linux-gnu "$ob"
  fi
fi

if [[ $WITH_TESTS == 1 && -x scripts/oracles.sh ]]; then
  scripts/oracles.sh
fi

BUILD_DIR=${BUILD_DIR:-build}
# ccache keys on paths relative to the checkout, so clones in other folders share the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
echo "setup: built $BUILD_DIR/bucketrl"
