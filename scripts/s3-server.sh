#!/usr/bin/env bash
# A real S3 server for tests: a single-node Ceph cluster (1 mon, 1 bluestore OSD, 1 radosgw)
# on loopback, from Debian's packages, all state under .cache/s3/ (git-ignored).
#   scripts/s3-server.sh start    idempotent: installs packages if missing, starts what is not
#                                 running, creates the test user and bucket, writes .cache/s3/env.sh
#   scripts/s3-server.sh stop     radosgw, then osd, then mon (by pid file, checking /proc/PID/comm)
#   scripts/s3-server.sh status   which daemons run; exit 0 when S3 answers
#   scripts/s3-server.sh env      prints the env.sh to source
#   scripts/s3-server.sh wipe     stop and delete all state
# Settings and quirks: ../shared/notes/s3-test-server.md (auth none, msgr2 only, crc mode for
# radosgw's monitor link, size-1 pools, bluestore block file outside the OSD data folder).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=$ROOT/.cache/s3
RGW_PORT=${BRL_S3_PORT:-7480}
MON_PORT=${BRL_S3_MON_PORT:-7481}
ACCESS_KEY=BRLTESTACCESSKEY0001
SECRET_KEY=brl-test-secret-key-not-for-production-0001
BUCKET=brl-test
export CEPH_CONF=$DIR/ceph.conf

log() { echo "s3-server: $*" >&2; }

rgw_answers() { curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$RGW_PORT/"; }

# pid_alive NAME COMM: the daemon's pid file names a live process of that program.
pid_alive() {
  local f=$DIR/run/$1.pid pid
  [[ -f $f ]] || return 1
  pid=$(cat "$f")
  [[ -n $pid && -r /proc/$pid/comm ]] || return 1
  [[ $(cat "/proc/$pid/comm") == "$2"* ]]
}

stop_one() {  # NAME COMM
  local f=$DIR/run/$1.pid pid i
  if ! pid_alive "$1" "$2"; then rm -f "$f"; return 0; fi
  pid=$(cat "$f")
  kill "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    [[ -d /proc/$pid ]] || break
    sleep 0.1
  done
  if [[ -d /proc/$pid ]] && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$2"* ]]; then
    log "$1 did not stop in 10 s; kill -9 $pid"
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

install_packages() {
  local missing=()
  for b in ceph-mon ceph-osd radosgw; do command -v "$b" >/dev/null || missing+=("$b"); done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  log "installing radosgw ceph-mon ceph-osd (about 20 s)"
  local SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends radosgw ceph-mon ceph-osd >/dev/null
}

write_conf() {
  local fsid=$1
  cat >"$DIR/ceph.conf" <<EOF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$MON_PORT
mon initial members = a
public addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
ms bind msgr1 = false
ms bind ipv6 = false
run dir = $DIR/run
pid file = $DIR/run/\$name.pid
admin socket = $DIR/run/\$name.asok
log file = $DIR/log/\$name.log
keyring = $DIR/keyring
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
osd crush chooseleaf type = 0
[mon]
mon data = $DIR/mon/\$name
paxos propose interval = 0.1
[osd]
osd data = $DIR/osd/\$name
osd objectstore = bluestore
bluestore block path = $DIR/block/\$name.img
bluestore block create = true
bluestore block size = 21474836480
bluestore cache size = 134217728
osd memory target = 1073741824
[client.rgw.0]
ms mon client mode = crc
rgw data = $DIR/rgw
rgw frontends = beast endpoint=127.0.0.1:$RGW_PORT
rgw enable usage log = false
EOF
}

write_env() {
  cat >"$DIR/env.sh" <<EOF
# Written by scripts/s3-server.sh: the local RGW test server.
export AWS_ENDPOINT_URL=http://127.0.0.1:$RGW_PORT
export AWS_ACCESS_KEY_ID=$ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$SECRET_KEY
export AWS_REGION=us-east-1
export AWS_DEFAULT_REGION=us-east-1
unset AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL_S3
export BRL_S3_TEST_BUCKET=$BUCKET
export BRL_S3_ADDRESSING=path
EOF
}

create_cluster() {
  log "creating a new cluster in $DIR"
  mkdir -p "$DIR"/{run,log,mon/mon.a,osd/osd.0,block,rgw}
  local fsid
  fsid=$(cat /proc/sys/kernel/random/uuid)
  write_conf "$fsid"
  ceph-authtool --create-keyring "$DIR/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool "$DIR/keyring" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' \
    --cap mds 'allow *' --cap mgr 'allow *' >/dev/null
  monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$MON_PORT]" "$DIR/monmap" >/dev/null
  ceph-mon --mkfs -i a --monmap "$DIR/monmap" --keyring "$DIR/keyring" >>"$DIR/log/setup.log" 2>&1
  touch "$DIR/.mon-created"
}

start_mon() {
  pid_alive mon.a ceph-mon && return 0
  ceph-mon -i a
}

start_osd() {
  pid_alive osd.0 ceph-osd && return 0
  if [[ ! -f $DIR/.osd-created ]]; then
    ceph --connect-timeout 20 osd create >>"$DIR/log/setup.log"
    ceph osd crush add osd.0 1 root=default >>"$DIR/log/setup.log" 2>&1
    ceph-osd -i 0 --mkfs >>"$DIR/log/setup.log" 2>&1
    touch "$DIR/.osd-created"
  fi
  ceph-osd -i 0
  local i
  for ((i = 0; i < 300; i++)); do
    ceph osd dump 2>/dev/null | grep -q '^osd.0 up' && return 0
    sleep 0.1
  done
  log "osd.0 did not come up in 30 s; see $DIR/log/osd.0.log"
  return 1
}

start_rgw() {
  if pid_alive client.rgw.0 radosgw && rgw_answers; then return 0; fi
  if [[ ! -f $DIR/.user-created ]]; then
    # Before radosgw starts (it also creates the pools); user create is not idempotent.
    radosgw-admin user info --uid=brl-test >/dev/null 2>&1 ||
      radosgw-admin user create --uid=brl-test --display-name="bucketrl tests" \
        --access-key="$ACCESS_KEY" --secret-key="$SECRET_KEY" >>"$DIR/log/setup.log" 2>&1
    touch "$DIR/.user-created"
  fi
  pid_alive client.rgw.0 radosgw || radosgw -n client.rgw.0
  local i
  for ((i = 0; i < 300; i++)); do
    rgw_answers && return 0
    sleep 0.1
  done
  log "radosgw does not answer on port $RGW_PORT after 30 s; see $DIR/log/client.rgw.0.log"
  return 1
}

create_bucket() {
  [[ -f $DIR/.bucket-created ]] && return 0
  local code
  # curl signs SigV4 itself; RGW insists on the (signed) payload hash header.
  code=$(curl -s -o "$DIR/log/bucket.xml" -w '%{http_code}' --max-time 10 -X PUT \
    -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
    --aws-sigv4 "aws:amz:us-east-1:s3" --user "$ACCESS_KEY:$SECRET_KEY" "http://127.0.0.1:$RGW_PORT/$BUCKET")
  if [[ $code != 200 && $code != 409 ]]; then
    log "creating bucket $BUCKET failed with HTTP $code: $(cat "$DIR/log/bucket.xml")"
    return 1
  fi
  touch "$DIR/.bucket-created"
}

cmd_start() {
  if pid_alive client.rgw.0 radosgw && rgw_answers && [[ -f $DIR/.bucket-created ]]; then
    write_env
    log "already running on 127.0.0.1:$RGW_PORT"
    return 0
  fi
  install_packages
  local t0=$SECONDS
  [[ -f $DIR/.mon-created ]] || create_cluster
  write_conf "$(awk '/^fsid/ {print $3}' "$DIR/ceph.conf")"
  start_mon
  start_osd
  start_rgw
  create_bucket
  write_env
  log "running on 127.0.0.1:$RGW_PORT (bucket $BUCKET) after $((SECONDS - t0)) s; source $DIR/env.sh"
}

cmd_stop() {
  stop_one client.rgw.0 radosgw
  stop_one osd.0 ceph-osd
  stop_one mon.a ceph-mon
}

cmd_status() {
  local n
  for n in "mon.a ceph-mon" "osd.0 ceph-osd" "client.rgw.0 radosgw"; do
    set -- $n
    if pid_alive "$1" "$2"; then echo "$1: running (pid $(cat "$DIR/run/$1.pid"))"; else echo "$1: stopped"; fi
  done
  if rgw_answers; then echo "S3: http://127.0.0.1:$RGW_PORT answers"; else echo "S3: not answering"; return 1; fi
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) [[ -f $DIR/env.sh ]] && cat "$DIR/env.sh" || { log "not started; run scripts/s3-server.sh start"; exit 1; } ;;
  wipe) cmd_stop; rm -rf "$DIR" ;;
  *) echo "usage: $0 start|stop|status|env|wipe" >&2; exit 2 ;;
esac
