#!/usr/bin/env bash
# Installs the independent oracles the tests compare against (npm packages, llama.cpp),
# into .oracles/ (git-ignored). Each scripts/oracles/*.sh is one oracle; all are idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .oracles
for s in scripts/oracles/*.sh; do
  [[ -e "$s" ]] || continue
  bash "$s"
done
