#!/usr/bin/env bash
# The Debian packages the libraries of an executable come from (those ldd finds outside the
# paths given), one line: what the image's runtime stage installs.
#   deploy/container/runtime-packages.sh EXE [EXCLUDED_PREFIX...]
set -euo pipefail
exe=$1
shift
ldd "$exe" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
  for x in "$@"; do [[ $lib == "$x"* ]] && continue 2; done
  real=$(realpath "$lib")
  # Debian 12 merged /lib into /usr/lib, but dpkg knows each file under the path it shipped.
  pkg=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$real" 2>/dev/null || dpkg -S "${real#/usr}" 2>/dev/null) ||
    { echo "runtime-packages: no Debian package holds $lib" >&2; exit 1; }
  echo "${pkg%%:*}"
done | sort -u | tr '\n' ' '
