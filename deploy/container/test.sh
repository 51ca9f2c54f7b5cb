#!/usr/bin/env bash
# The container image, built and run for real: podman (Debian's package) builds
# deploy/container/Dockerfile on a Debian 12 base made here with debootstrap (no image
# registry is reachable), then the proxy, two workers and the evaluator each run in a container
# of it against the test Ceph RGW, a signed run of the demo's fast recipe: S3 credentials from
# the environment, each worker's signing key from a mounted file. Passes when held-out accuracy
# reaches the demo's 0.9, `bucketrl verify` (in a container) passes, both workers' signed
# updates were folded, the image runs as a non-root user, and neither the image nor any
# container's log holds the S3 secret or a private key.
#   deploy/container/test.sh [--base DIR] [--timeout S] [--keep] [--no-build]
# --base: a fast-recipe base folder (else the image pretrains one, ~3 min). Root only.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
BASE="" TIMEOUT=900 KEEP=0 BUILD=1 STARTED_S3=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --base) BASE=$(realpath "$2"); shift ;;
    --timeout) TIMEOUT=$2; shift ;;
    --keep) KEEP=1 ;;
    --no-build) BUILD=0 ;;
    *) echo "container test: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
say() { echo "container test: $*"; }
[[ $(id -u) == 0 ]] || { say "needs root (podman's rootful mode; debootstrap)"; exit 2; }
missing=()
for p in podman runc debootstrap; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
fi
# What makes podman run on these VMs: runc (crun refuses their hybrid cgroup set-up), the
# host's network (no netavark bridge here), and limits root may lower but not raise.
POD=(podman --runtime /usr/sbin/runc)
LIMITS=(--network host --ulimit nofile=1024:4096 --ulimit nproc=1024:4096)
IMAGE=localhost/bucketrl:0.1.0
BASE_IMAGE=localhost/debian:bookworm-min

W=$(mktemp -d /tmp/brl-container.XXXXXX)
chmod 755 "$W"
names=()
cleanup() {
  for n in "${names[@]}"; do "${POD[@]}" rm -f -t 5 "$n" >/dev/null 2>&1 || true; done
  [[ $STARTED_S3 == 1 ]] && "$repo/scripts/s3-server.sh" stop >/dev/null 2>&1
  if [[ $KEEP == 1 ]]; then say "kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT

if ! "${POD[@]}" image exists "$BASE_IMAGE"; then
  say "making $BASE_IMAGE with debootstrap"
  root=$W/rootfs
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$W/debootstrap.log" 2>&1 ||
    { tail -20 "$W/debootstrap.log"; exit 1; }
  cat >"$root/etc/apt/sources.list" <<'SRC'
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SRC
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | "${POD[@]}" import - "$BASE_IMAGE" >/dev/null
  rm -rf "$root"
fi

if [[ $BUILD == 1 ]]; then
  say "building $IMAGE"
  t0=$SECONDS
  ccache_dir=${CCACHE_DIR:-$HOME/.cache/ccache}  # the host build's objects, reused
  mkdir -p "$ccache_dir"
  # This machine reaches PyPI through a proxy whose CA is in the host's bundle (PIP_CERT).
  cert=()
  [[ -n ${PIP_CERT:-} ]] && cert=(-v "$PIP_CERT:/etc/ssl/certs/build-ca.crt:ro" --build-arg PIP_CERT=/etc/ssl/certs/build-ca.crt)
  "${POD[@]}" build "${LIMITS[@]}" --build-arg BASE="$BASE_IMAGE" -v "$ccache_dir:/ccache" "${cert[@]}" \
    -f deploy/container/Dockerfile -t "$IMAGE" . >"$W/build.log" 2>&1 || { tail -40 "$W/build.log"; exit 1; }
  say "built in $((SECONDS - t0)) s; $(grep -m1 '^runtime packages:' "$W/build.log" || true)"
fi
size=$("${POD[@]}" image inspect "$IMAGE" --format '{{.Size}}')
say "image size $((size / 1000000)) MB"

ok=1
fail() { say "FAIL: $*"; ok=0; }
uid=$("${POD[@]}" run --rm "${LIMITS[@]}" --entrypoint id "$IMAGE" -u)
[[ $uid == 10001 ]] || fail "the image runs as uid $uid, not the non-root 10001"
"${POD[@]}" run --rm "${LIMITS[@]}" --entrypoint sh "$IMAGE" -c 'command -v gcc python3 c++' >/dev/null &&
  fail "the runtime image holds a compiler or Python"

scripts/s3-server.sh status >/dev/null 2>&1 || STARTED_S3=1
scripts/s3-server.sh start >/dev/null
source <(scripts/s3-server.sh env)
BUCKET="s3://$BRL_S3_TEST_BUCKET/container-$(basename "$W")"
ENVS=(-e AWS_ACCESS_KEY_ID -e AWS_SECRET_ACCESS_KEY -e AWS_ENDPOINT_URL -e AWS_REGION)
mkdir -p "$W/data/keys"
chown -R 10001:10001 "$W/data"
brl() { "${POD[@]}" run --rm "${LIMITS[@]}" "${ENVS[@]}" -v "$W/data:/data" "$IMAGE" "$@"; }

if [[ -n $BASE ]]; then
  cp -r "$BASE" "$W/data/base"
  chown -R 10001:10001 "$W/data/base"
else
  say "pretraining the fast recipe's base in the image"
  brl pretrain --recipe fast --out /data/base --threads 1 >"$W/pretrain.log" 2>&1 || { tail "$W/pretrain.log"; exit 1; }
fi
brl demo --recipe fast --print-config >"$W/data/run.json"
for w in w0 w1; do brl keygen --out "/data/keys/$w" >/dev/null; done
cat "$W"/data/keys/*.pub >"$W/data/keys/allowed"
brl init --bucket "$BUCKET" --config /data/run.json --model /data/base \
  --set security.allowed_keys_file=/data/keys/allowed >"$W/init.log" 2>&1 || { cat "$W/init.log"; exit 1; }

port=$((20000 + RANDOM % 20000))
start() {  # NAME ARGS...: a detached container of the image
  local n=brl-$1-$(basename "$W")
  shift
  names+=("$n")
  "${POD[@]}" run -d --name "$n" "${LIMITS[@]}" "${ENVS[@]}" "$@" >/dev/null
}
start proxy "$IMAGE" proxy --bucket "$BUCKET" --http "127.0.0.1:$port"
for i in 0 1; do
  start "w$i" -v "$W/data/keys/w$i.pem:/run/secrets/signing-key.pem:ro" \
    -e BRL_SIGNING_KEY_FILE=/run/secrets/signing-key.pem \
    "$IMAGE" worker --bucket "$BUCKET" --id "w$i" --shard "$i/2" --threads 1
done
start evaluator "$IMAGE" evaluator --bucket "$BUCKET" --min-interval 5 --threads 1
say "proxy, w0, w1 and the evaluator running (bucket $BUCKET, dashboard on 127.0.0.1:$port)"

source deploy/progress.sh
status() { brl status --bucket "$BUCKET" --json 2>/dev/null; }
t0=$SECONDS reached=0 acc=0 version=0 health=""
while ((SECONDS - t0 < TIMEOUT)); do
  read -r version acc < <(status | run_progress)
  [[ -z $health ]] && health=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)
  if awk -v a="$acc" 'BEGIN { exit !(a >= 0.9) }'; then reached=1; break; fi
  sleep 5
done
say "after $((SECONDS - t0)) s: version $version, best held-out accuracy $acc"
for n in "${names[@]}"; do "${POD[@]}" stop -t 20 "$n" >/dev/null; done
[[ $reached == 1 ]] || fail "held-out accuracy never reached 0.9"
[[ $health == 200 ]] || fail "the proxy's /health answered '$health' from its container, not 200"
brl verify --bucket "$BUCKET" >"$W/verify.log" 2>&1 || fail "verify"
cat "$W/verify.log"
# Every version's manifest, read in one container: both workers folded, every update signed.
"${POD[@]}" run --rm "${LIMITS[@]}" "${ENVS[@]}" --entrypoint sh "$IMAGE" -c \
  "for v in \$(seq 1 $version); do bucketrl bucket cat $BUCKET/global/v\$(printf %08d \$v)/manifest.json; echo; done" \
  >"$W/manifests.jsonl" 2>/dev/null || true
python3 - "$W/manifests.jsonl" <<'PY' || fail "not both workers' signed updates were folded"
import json, sys
folded, unsigned = {}, 0
text, pos, dec = open(sys.argv[1]).read(), 0, json.JSONDecoder()
while text[pos:].strip():  # the manifests one after another, each printed over many lines
    pos += len(text[pos:]) - len(text[pos:].lstrip())
    manifest, pos = dec.raw_decode(text, pos)
    for u in manifest.get("updates", []):
        folded[u["worker"]] = folded.get(u["worker"], 0) + 1
        unsigned += not u.get("signer")
print("container test: updates folded per worker:", folded, "unsigned:", unsigned)
sys.exit(0 if folded.get("w0") and folded.get("w1") and not unsigned else 1)
PY
# No secret in any log or in the image.
secrets=("$AWS_SECRET_ACCESS_KEY" "$(sed -n 2p "$W/data/keys/w0.pem")" "$(sed -n 2p "$W/data/keys/w1.pem")")
for n in "${names[@]}"; do
  log=$("${POD[@]}" logs "$n" 2>&1)
  for s in "${secrets[@]}"; do [[ $log == *"$s"* ]] && fail "$n's log holds a secret"; done
done
"${POD[@]}" image save "$IMAGE" -o "$W/image.tar"
for s in "${secrets[@]}"; do grep -qF -- "$s" "$W/image.tar" && fail "the image holds a secret"; done
rm -f "$W/image.tar"
for n in "${names[@]}"; do echo "== $n"; "${POD[@]}" logs "$n" 2>&1 | tail -3; done
[[ $ok == 1 ]] && say "PASS" || exit 1
