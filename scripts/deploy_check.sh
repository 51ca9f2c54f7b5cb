#!/usr/bin/env bash
# The deployment recipes for real, one base model for both (CI runs the Slurm one after the
# tests; the container one takes 12 more minutes and runs outside CI):
# deploy/slurm/test.sh (a one-machine Slurm cluster, a worker requeued mid-run, directory
# bucket) and deploy/container/test.sh (the image built with podman; proxy, workers and
# evaluator in containers against the test RGW). The Kubernetes manifests are validated by
# the test suite (k8s_manifests_test). Root only (Slurm's daemons, podman).
#   scripts/deploy_check.sh [slurm] [container]   (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
which=("$@")
[[ ${#which[@]} -gt 0 ]] || which=(slurm container)
base=.cache/deploy-base
if [[ ! -f $base/model.safetensors ]]; then
  echo "deploy check: pretraining the fast recipe's base once for every recipe"
  t0=$SECONDS
  build/bucketrl pretrain --recipe fast --out "$base" > .cache/deploy-base.log 2>&1 ||
    { tail -20 .cache/deploy-base.log; exit 1; }
  echo "deploy check: base made in $((SECONDS - t0)) s"
fi
for w in "${which[@]}"; do
  t0=$SECONDS
  case $w in
    slurm) deploy/slurm/test.sh --base "$base" ;;
    container) deploy/container/test.sh --base "$base" ;;
    *) echo "deploy check: unknown recipe $w (slurm, container)" >&2; exit 2 ;;
  esac
  echo "deploy check: $w passed in $((SECONDS - t0)) s"
done
