#!/usr/bin/env bash
# Run HERE (Debian 12, registries reachable) before a call to the GPU machine: downloads the
# Debian packages the GPU machine lacks (toml++, PCRE2 and ICU headers; it reaches no
# registry) into .cache/gpu-debs (git-ignored). Carry that folder; scripts/gpu_build.sh
# unpacks it there. See ../shared/notes/gpu-machine.md. Also the demo's base model, pretrained
# here into .cache/demo-base (git-ignored; carry it too): gpu_check.sh's demo reuses it, where
# the GPU machine would spend a minute or more of the call's device time pretraining it.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=.cache/gpu-debs
mkdir -p "$DIR"
pkgs=(libtomlplusplus-dev libtomlplusplus3 libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
      libicu-dev libicu72 icu-devtools)
if ! ls "$DIR"/libicu-dev_*.deb >/dev/null 2>&1; then
  apt-get update -qq
  (cd "$DIR" && apt-get download "${pkgs[@]}")
fi
du -sh "$DIR"
# The demo checks the base's recipe record and pretrains afresh where it no longer matches; to
# remake this copy after a recipe change, remove .cache/demo-base.
if [[ ! -f .cache/demo-base/bucketrl_base_recipe.json ]]; then
  if [[ -x build/bucketrl ]]; then
    rm -rf .cache/demo-base
    build/bucketrl pretrain --recipe fast --out .cache/demo-base
  else
    echo "gpu_debs: no build/bucketrl to pretrain .cache/demo-base with (build first); the GPU machine will pretrain it" >&2
  fi
fi
du -sh .cache/demo-base 2>/dev/null || true
