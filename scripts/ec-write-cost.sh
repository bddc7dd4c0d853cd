#!/usr/bin/env bash
# Cairn alone: an EC 2+1 pool (4 KiB stripe unit) next to a size-3 pool on
# one 3-OSD `cairn up` cluster, `cairn bench object` writes of new objects
# and then overwrites of 200 objects, 10 s each, 16 in flight, one round.
# Used to measure what the roll-back records cost (docs/performance.md,
# "Roll-back records"): run it with CAIRN pointing at each binary, in turn.
#
#   CAIRN=path/to/cairn SIZES="4K 4M" scripts/ec-write-cost.sh
set -euo pipefail
CAIRN=${CAIRN:-${CARGO_TARGET_DIR:-/var/tmp/cairn-ci-target}/release/cairn}
DATA=${DATA:-/var/tmp/cairn-ec-write-cost}
PORT=${PORT:-18450}
"$CAIRN" down --data "$DATA" > /dev/null 2>&1 || true
rm -rf "$DATA"
"$CAIRN" up --detach --data "$DATA" --base-port "$PORT" --mds 0 > /dev/null
trap '"$CAIRN" down --data "$DATA" > /dev/null 2>&1 || true; rm -rf "$DATA"' EXIT
CONF=$DATA/cairn.toml
"$CAIRN" pool create rep3 --size 3 --min-size 2 --pg-num 64 --failure-domain osd --conf "$CONF" > /dev/null
"$CAIRN" pool create ec21 --erasure 2+1 --stripe-unit 4K --pg-num 64 --failure-domain osd --conf "$CONF" > /dev/null
sleep 5
run() { # label pool size extra...
  local label=$1 pool=$2 size=$3; shift 3
  "$CAIRN" bench object --conf "$CONF" --pool "$pool" --mode write --concurrency 16 \
    --duration 10s --object-size "$size" --json --list "$DATA/list-$label.txt" "$@" 2> /dev/null \
    | python3 -c "import json,sys; d=json.load(sys.stdin); print('$label', round(d['iops']), 'IOPS, p50', round(d['latency_p50_secs']*1000, 2), 'ms')" \
    || echo "$label failed"
}
for size in ${SIZES:-4K}; do
  for pool in rep3 ec21; do run "$pool-$size-create" "$pool" "$size"; done
  for pool in rep3 ec21; do run "$pool-$size-overwrite" "$pool" "$size" --objects 200; done
done
