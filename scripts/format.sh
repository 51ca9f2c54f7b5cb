#!/usr/bin/env bash
# The tree's C++ layout is .clang-format's (clang-format 14, Debian 12's). Without arguments:
# reformats every tracked .h/.cpp in place. --check: changes nothing, lists the files that
# differ and exits 1 when any does (CI runs this).
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT=${CLANG_FORMAT:-clang-format-14}
command -v "$CLANG_FORMAT" >/dev/null || { echo "format: $CLANG_FORMAT not found; run scripts/setup.sh --test" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.h' '*.cpp')
if [[ ${1:-} == --check ]]; then
  bad=0
  for f in "${files[@]}"; do
    if ! "$CLANG_FORMAT" --style=file "$f" | cmp -s - "$f"; then
      echo "format: $f differs from .clang-format (scripts/format.sh fixes it)"
      bad=1
    fi
  done
  [[ $bad == 0 ]] && echo "format: ${#files[@]} files follow .clang-format"
  exit $bad
fi
"$CLANG_FORMAT" --style=file -i "${files[@]}"
