#!/usr/bin/env bash
# Run ON the GPU machine (the device tool; Ubuntu 24.04, torch 2.11+cu130 in /opt/torch/.venv,
# g++ 13, CMake 4, 16 cores): builds bucketrl against that machine's torch in about a minute.
# Prepare here with scripts/gpu_debs.sh, then e.g.
#   run(command="scripts/gpu_build.sh && build-gpu/bucketrl version", carry=[".cache/gpu-debs"])
# The Debian packages it lacks (toml++, PCRE2, ICU headers) are unpacked with dpkg -x into a
# prefix under /tmp (never into /), their pkg-config files pointed at that prefix.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${BRL_PYTHON:-/opt/torch/.venv/bin/python3}
DEBS=${BRL_GPU_DEBS:-.cache/gpu-debs}
PREFIX=${BRL_GPU_PREFIX:-/tmp/brl-deps}
BUILD_DIR=${BUILD_DIR:-build-gpu}
if [[ ! -d $PREFIX/usr ]]; then
  ls "$DEBS"/*.deb >/dev/null 2>&1 || { echo "gpu_build: no .deb files in $DEBS: run scripts/gpu_debs.sh here and carry it" >&2; exit 1; }
  mkdir -p "$PREFIX"
  for f in "$DEBS"/*.deb; do dpkg -x "$f" "$PREFIX"; done
  # pkg-config files name /usr as their prefix; point them at the unpacked copy.
  find "$PREFIX" -name '*.pc' -exec sed -i "s|^prefix=/usr|prefix=$PREFIX/usr|" {} +
fi
MULTI=$PREFIX/usr/lib/x86_64-linux-gnu
export PKG_CONFIG_PATH=$MULTI/pkgconfig:$PREFIX/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export LD_LIBRARY_PATH=$MULTI${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Debian 12's ICU 72 library beside Ubuntu's ICU 74: link the unpacked one by full path via
# pkg-config; at run time LD_LIBRARY_PATH (above) finds it.
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DBRL_PYTHON="$PY" \
  -DCMAKE_PREFIX_PATH="$PREFIX/usr;$MULTI/cmake" -DTORCH_CUDA_ARCH_LIST=9.0 >/dev/null
# BRL_TARGETS: build only these (e.g. "bucketrl cuda_test"); default everything.
cmake --build "$BUILD_DIR" -j"$(nproc)" ${BRL_TARGETS:+--target $BRL_TARGETS}
echo "gpu_build: built $BUILD_DIR/bucketrl (run with LD_LIBRARY_PATH=$MULTI)"
