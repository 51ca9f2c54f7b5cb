#!/usr/bin/env bash
# Set up, start the S3 test server, run the test suite.
#   scripts/test.sh            the full suite (ctest, all labels)
#   scripts/test.sh -L quick   a quick subset (any ctest arguments pass through)
# A test that lacks what it needs (a GPU, root, Chromium) reports Skipped, not Passed. With
# BRL_ALLOWED_SKIPS=REGEX (.ci/run sets it) a skipped test whose name does not match fails
# the run: on a machine that has the means, no test may quietly not run.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
scripts/setup.sh --test
BUILD_DIR=${BUILD_DIR:-build}
if [[ -x scripts/s3-server.sh ]]; then
  scripts/s3-server.sh start
  trap '"$ROOT/scripts/s3-server.sh" stop || true' EXIT
  # shellcheck disable=SC1091
  source .cache/s3/env.sh
fi
cd "$BUILD_DIR"
log=Testing/ctest-output.log
mkdir -p Testing
rc=0
ctest --output-on-failure -j2 "$@" 2>&1 | tee "$log" || rc=$?
# ctest's summary lists skipped tests as "  N - name (Skipped)".
mapfile -t skipped < <(sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\) (Skipped)$/\1/p' "$log")
if [[ ${#skipped[@]} -gt 0 ]]; then
  echo "test: skipped (each says why above): ${skipped[*]}"
  if [[ -n ${BRL_ALLOWED_SKIPS:-} ]]; then
    bad=()
    for t in "${skipped[@]}"; do [[ $t =~ $BRL_ALLOWED_SKIPS ]] || bad+=("$t"); done
    if [[ ${#bad[@]} -gt 0 ]]; then
      echo "test: FAIL: skipped on a machine that should run them (allowed to skip: /$BRL_ALLOWED_SKIPS/): ${bad[*]}" >&2
      rc=1
    fi
  fi
fi
exit $rc
