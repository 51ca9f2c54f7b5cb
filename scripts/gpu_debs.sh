#!/usr/bin/env bash
# Run HERE (Debian 12, registries reachable) before a call to the GPU machine: downloads the
# Debian packages the GPU machine lacks (toml++, PCRE2 and ICU headers; it reaches no
# registry) into .cache/gpu-debs (git-ignored). Carry that folder; scripts/gpu_build.sh
# unpacks it there. See ../shared/notes/gpu-machine.md.
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
