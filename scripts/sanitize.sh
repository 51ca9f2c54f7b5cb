#!/usr/bin/env bash
# The torch-free unit tests (areas util, store, tokenizer, tasks, config, codec, protocol,
# obs, proxy) under AddressSanitizer + UndefinedBehaviorSanitizer (+ LeakSanitizer), built
# with clang in build-san/ (see scripts/san_build.sh). The torch areas (model, generate, lora,
# grpo, worker, launch): scripts/sanitize_torch.sh.
#   scripts/sanitize.sh              the quick (unit) tests
#   scripts/sanitize.sh -L s3        any ctest arguments instead (the S3 tests need the server)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/san_build.sh
san_build all
cd "$SAN_BUILD_DIR"
if [[ $# -eq 0 ]]; then set -- -L quick; fi
ctest --output-on-failure -j"${BRL_JOBS:-2}" "$@"
