#!/usr/bin/env bash
# Set up, start the S3 test server, run the test suite.
#   scripts/test.sh            the full suite (ctest, all labels)
#   scripts/test.sh -L quick   a quick subset (any ctest arguments pass through)
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
ctest --output-on-failure -j2 "$@"
