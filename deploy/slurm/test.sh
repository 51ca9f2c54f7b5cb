#!/usr/bin/env bash
# A real one-machine Slurm cluster (slurmctld, slurmd and munge from Debian's packages, on
# loopback, all state in a scratch folder) runs the fast demo recipe with proxy.sbatch and a
# 2-task workers.sbatch array: the held-out accuracy must reach the demo's target (0.9) while
# one array task is cancelled and requeued mid-run (scontrol requeue), then `bucketrl verify`
# must pass on the bucket.
#   deploy/slurm/test.sh [--s3] [--base DIR] [--timeout S] [--keep]
#   --s3      the bucket on the test S3 server (scripts/s3-server.sh start) instead of a folder
#   --base    a base model made by `bucketrl pretrain --recipe fast` (default: made here, ~2 min)
# Needs root (the daemons run as root here), the slurmctld, slurmd, slurm-client and munge
# packages (installed when missing) and a built build/bucketrl (BRL_BIN overrides).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
S3=0 BASE="" TIMEOUT=900 KEEP=0 STARTED_S3=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --s3) S3=1 ;;
    --base) BASE=$(realpath "$2"); shift ;;
    --timeout) TIMEOUT=$2; shift ;;
    --keep) KEEP=1 ;;
    *) echo "slurm test: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
export BRL_BIN=${BRL_BIN:-$repo/build/bucketrl}
[[ -x $BRL_BIN ]] || { echo "slurm test: $BRL_BIN is not built (scripts/setup.sh)" >&2; exit 2; }
missing=()
for p in slurmctld slurmd slurm-client munge; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
fi

W=$(mktemp -d /tmp/brl-slurm.XXXXXX)
say() { echo "slurm test: $*"; }
pids=()
cleanup() {
  scancel --quiet --name=brl-worker,brl-proxy 2>/dev/null || true
  for _ in $(seq 40); do [[ -z $(squeue -h 2>/dev/null) ]] && break; sleep 1; done
  for f in slurmd slurmctld munged; do [[ -f $W/$f.pid ]] && kill "$(cat "$W/$f.pid")" 2>/dev/null || true; done
  sleep 1
  [[ $STARTED_S3 == 1 ]] && "$repo/scripts/s3-server.sh" stop >/dev/null 2>&1
  if [[ $KEEP == 1 ]]; then say "kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT

# ---- munge and Slurm on loopback ---------------------------------------------------------------
mkdir -p "$W"/{state,spool,jobs,munge}
dd if=/dev/urandom of="$W/munge/munge.key" bs=1024 count=1 status=none
chmod 700 "$W/munge"; chmod 400 "$W/munge/munge.key"
munged --force --key-file="$W/munge/munge.key" --socket="$W/munge/munge.sock" \
  --pid-file="$W/munged.pid" --log-file="$W/munged.log" --seed-file="$W/munge/seed"
node=$(hostname -s)
port=$((20000 + RANDOM % 20000))
cat > "$W/slurm.conf" <<CONF
ClusterName=brltest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$W/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool
SlurmctldPidFile=$W/slurmctld.pid
SlurmdPidFile=$W/slurmd.pid
SlurmctldLogFile=$W/slurmctld.log
SlurmdLogFile=$W/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
# Three one-CPU jobs (proxy + evaluator, two workers) on this machine whatever its core count.
NodeName=$node NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
KillWait=10
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$W/slurm.conf
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF" -N "$node"
for _ in $(seq 60); do sinfo -h -o %T 2>/dev/null | grep -q idle && break; sleep 1; done
sinfo -h -o "%T" | grep -q idle || { say "the node never came up"; tail -20 "$W"/slurm*.log; exit 1; }
say "cluster up: node $node, slurmctld on 127.0.0.1:$port"

# ---- the run -----------------------------------------------------------------------------------
if [[ -z $BASE ]]; then
  BASE=$W/base
  say "pretraining the fast recipe's base"
  "$BRL_BIN" pretrain --recipe fast --out "$BASE" --threads 1 > "$W/pretrain.log" 2>&1
fi
"$BRL_BIN" demo --recipe fast --print-config > "$W/run.json"
if [[ $S3 == 1 ]]; then
  scripts/s3-server.sh status >/dev/null 2>&1 || STARTED_S3=1  # stopped again at the end
  scripts/s3-server.sh start >/dev/null
  # shellcheck disable=SC1090
  source <(scripts/s3-server.sh env)
  export BRL_BUCKET="s3://$BRL_S3_TEST_BUCKET/slurm-$(basename "$W")"
else
  export BRL_BUCKET=$W/bucket
fi
"$BRL_BIN" init --bucket "$BRL_BUCKET" --config "$W/run.json" --model "$BASE" > "$W/init.log"
cd "$W/jobs"  # the jobs' logs
export BRL_PROXY_ARGS="--http off" BRL_EVALUATOR_ARGS="--min-interval 5"
proxy=$(sbatch --parsable -c 1 "$repo/deploy/slurm/proxy.sbatch")
workers=$(sbatch --parsable -c 1 --array=0-1 "$repo/deploy/slurm/workers.sbatch")
say "proxy job $proxy, worker array $workers (bucket $BRL_BUCKET)"

source "$repo/deploy/progress.sh"
newest() { "$BRL_BIN" status --bucket "$BRL_BUCKET" --json 2>/dev/null | run_progress; }
# The requeued task ran again (the script logs its restart count) and uploaded after it.
rerun_uploaded() { awk '/restart [1-9]/ { r = 1 } r && /uploaded/ { u = 1 } END { exit !u }' "$1" 2>/dev/null; }
requeued_log=$W/jobs/brl-worker-${workers}_1.log
t0=$SECONDS requeued=0 reached=0 rerun=0 version=0 acc=0
while (( SECONDS - t0 < TIMEOUT )); do
  read -r version acc < <(newest)
  if [[ $requeued == 0 && $version -ge 3 ]]; then
    say "version $version: cancelling and requeueing array task ${workers}_1"
    scontrol requeue "${workers}_1"
    requeued=$SECONDS
  fi
  if [[ $requeued != 0 && $rerun == 0 ]] && rerun_uploaded "$requeued_log"; then
    rerun=1
    say "the requeued task runs again and uploaded an update $((SECONDS - requeued)) s after its requeue"
  fi
  if [[ $rerun == 1 ]] && awk -v a="$acc" 'BEGIN { exit !(a >= 0.9) }'; then reached=1; break; fi
  sleep 5
done
say "after $((SECONDS - t0)) s: version $version, best held-out accuracy $acc"
squeue -h -o "%i %T %r" || true
scancel "$proxy" "$workers" || true  # SIGTERM to the batch scripts, SIGKILL after KillWait
for _ in $(seq 60); do [[ -z $(squeue -h) ]] && break; sleep 1; done
ok=1
"$BRL_BIN" verify --bucket "$BRL_BUCKET" > "$W/verify.log" 2>&1 || { say "FAIL: verify"; ok=0; }
cat "$W/verify.log"
[[ $reached == 1 ]] || { say "FAIL: held-out accuracy never reached 0.9"; ok=0; }
[[ $rerun == 1 ]] || { say "FAIL: the requeued task never ran again and uploaded"; ok=0; }
for f in "$W"/jobs/*.log; do echo "== $f"; tail -5 "$f"; done
[[ $ok == 1 ]] && say "PASS" || exit 1
