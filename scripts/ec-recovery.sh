#!/usr/bin/env bash
# Recovery of one lost OSD on a 4+2 pool next to a size-3 pool holding the
# same data (issue 22's recovery measurement). For each pool, on a fresh
# 6-OSD `cairn up` cluster (failure domain osd, 64 PGs, default settings:
# 4 pushes in flight per OSD, 16 when clients are idle, no byte limit):
#
#   1. write N objects of 4 MiB, wait for active+clean;
#   2. drop the page cache, note every OSD's bytes read from the device
#      (/proc/PID/io read_bytes) and pushed for recovery;
#   3. stop osd.0; once the monitor marks it down, mark it out and add an
#      empty OSD in its place (the disk replaced: a 4+2 PG needs six
#      OSDs); time until every PG is active+clean again;
#   4. report the time, the bytes the surviving OSDs read from their
#      devices, and the bytes recovery wrote to the new copies or shards
#      (next to the pool's raw bytes per OSD: what the lost OSD held).
#
#   scripts/ec-recovery.sh [OBJECTS] [ROUNDS]     # default 300 objects, 1 round
#
# Needs root (drop_caches, /proc/PID/io of the daemons).
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
OBJECTS=${1:-300}
ROUNDS=${2:-1}
WORK=${WORK:-/var/tmp/cairn-ec-recovery}
PORT=18600
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/cairn-ci-target}
cd "$HERE"
if [ -z "${CAIRN:-}" ]; then
  cargo build --release --quiet --bin cairn
  CAIRN=$CARGO_TARGET_DIR/release/cairn
fi
rm -rf "$WORK"
mkdir -p "$WORK"
DATA=$WORK/cluster
CONF=$DATA/cairn.toml
trap '"$CAIRN" down --data "$DATA" > /dev/null 2>&1 || true' EXIT

status() { "$CAIRN" status --json --conf "$CONF"; }

clean() {
  status | python3 -c '
import json, sys
s = json.load(sys.stdin)
states = s["pgs_by_state"]
sys.exit(0 if s["pg_count"] > 0 and set(states) == {"active+clean"} else 1)'
}

wait_clean() {
  local deadline=$((SECONDS + 1800))
  sleep 2
  until clean; do
    [ $SECONDS -lt $deadline ] || { echo "not clean after 30 min" >&2; exit 1; }
    sleep 0.5
  done
}

# Bytes read from the devices by the OSDs running, summed (the new OSD
# reads next to nothing).
read_bytes() {
  local total=0 pid
  for f in "$DATA"/run/osd.*.pid; do
    pid=$(cat "$f" 2> /dev/null) || continue
    [ -r /proc/$pid/io ] || continue
    total=$((total + $(awk '/^read_bytes/ {print $2}' /proc/$pid/io)))
  done
  echo $total
}

recovered_bytes() {
  status | python3 -c '
import json, sys
s = json.load(sys.stdin)
print(s["recovery"]["recovered_bytes"])'
}

echo "| round | pool | stored | raw per OSD | marked down after | then active+clean after | read from devices | recovered (written) | read ÷ raw per OSD |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
for round in $(seq 1 "$ROUNDS"); do
  for pool in rep3 ec42; do
    "$CAIRN" down --data "$DATA" > /dev/null 2>&1 || true
    rm -rf "$DATA"
    "$CAIRN" up --detach --data "$DATA" --base-port $PORT --osds 6 --mds 0 > /dev/null
    if [ $pool = rep3 ]; then
      "$CAIRN" pool create $pool --size 3 --pg-num 64 --failure-domain osd --conf "$CONF" > /dev/null
    else
      "$CAIRN" pool create $pool --erasure 4+2 --pg-num 64 --failure-domain osd --conf "$CONF" > /dev/null
    fi
    # Enough time to write every name at least once at this machine's
    # rate; later writes overwrite the same names.
    "$CAIRN" bench object --conf "$CONF" --pool $pool --mode write --object-size 4M \
      --objects "$OBJECTS" --concurrency 16 --duration "$((OBJECTS / 20 + 5))s" --json \
      > "$WORK/write-$pool-$round.json"
    wait_clean
    sleep 4  # the next heartbeats carry every OSD's figures
    usage=$("$CAIRN" df --json --conf "$CONF")
    read -r stored lost < <(echo "$usage" | python3 -c "
import json, sys
d = json.load(sys.stdin)
p = [p for p in d['pools'] if p['name'] == '$pool'][0]
# The lost OSD's share: the pool's raw bytes over its six OSDs.
print(p['stored_bytes'], p['raw_used_bytes'] // 6)")
    sync
    echo 3 > /proc/sys/vm/drop_caches
    before_read=$(read_bytes)
    before_recovered=$(recovered_bytes)
    id=$(cat "$DATA/osd.0/osd_id")
    stopped=$(date +%s.%N)
    "$CAIRN" daemon stop osd.0 --data "$DATA" > /dev/null
    # The monitor marks it down after its grace (the same for both pools);
    # recovery is timed from there.
    until "$CAIRN" osd tree --json --conf "$CONF" | python3 -c "
import json, sys
t = json.load(sys.stdin)
osds = [o for r in t['racks'] for h in r['hosts'] for o in h['osds']]
sys.exit(0 if any(o['id'] == $id and not o['up'] for o in osds) else 1)"; do
      sleep 0.2
    done
    start=$(date +%s.%N)
    "$CAIRN" osd out "$id" --conf "$CONF" > /dev/null
    # Its replacement: an empty OSD (a 4+2 PG needs six failure domains).
    "$CAIRN" daemon add osd --data "$DATA" > /dev/null
    wait_clean
    end=$(date +%s.%N)
    after_read=$(read_bytes)
    sleep 4
    after_recovered=$(recovered_bytes)
    python3 -c "
stored, lost = $stored, $lost
read = $after_read - $before_read
rec = $after_recovered - $before_recovered
gib = lambda b: f'{b / 2**30:.2f} GiB'
print(f'| $round | $pool | {gib(stored)} | {gib(lost)} | {$start - $stopped:.1f} s | {$end - $start:.1f} s | {gib(read)} | {gib(rec)} | {read / max(lost, 1):.2f} |')"
  done
done
