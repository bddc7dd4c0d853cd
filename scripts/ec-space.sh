#!/usr/bin/env bash
# Raw bytes per stored byte of erasure-coded and replicated pools, Cairn
# next to Ceph (issue 22's space measurement): objects of 4 KiB, 64 KiB and
# 4 MiB written into each pool, and the disk space the OSDs allocated for
# them divided by the bytes written. Cairn: the OSD stores' allocated bytes
# (`stored_bytes` in `cairn status --json`, summed over OSDs) before and
# after each set, on a 6-OSD cluster (pools 2+1, 4+2, size 3); shards of
# 1 KiB or less live inline in the store's metadata records and allocate
# nothing there (their cost is the layout's (k+m)/k). Ceph:
# `ceph df detail` of its 3-OSD anchor cluster (pools ec21 and rep3; 4+2
# needs 6 failure domains), USED over STORED.
#
#   scripts/ec-space.sh
#
# Needs root. Deploys Ceph with ../shared/anchors/ceph/deploy.sh if it is
# not running and tears it down at the end only if it deployed it.
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
ANCHOR=${ANCHOR:-$HERE/../shared/anchors/ceph}
WORK=${WORK:-/var/tmp/cairn-ec-space}
DATA=$WORK/cairn
PORT=18400
export CEPH_CONF=/var/tmp/ceph-anchor/ceph.conf
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/cairn-ci-target}
cd "$HERE"
if [ -z "${CAIRN:-}" ]; then
  cargo build --release --quiet --bin cairn
  CAIRN=$CARGO_TARGET_DIR/release/cairn
fi
rm -rf "$WORK"
mkdir -p "$WORK"

deployed=0
if ! timeout 10 ceph -s > /dev/null 2>&1; then
  "$ANCHOR/deploy.sh" > "$WORK/ceph-deploy.log" 2>&1
  deployed=1
fi
cleanup() {
  "$CAIRN" down --data "$DATA" > /dev/null 2>&1 || true
  if [ "$deployed" = 1 ]; then "$ANCHOR/teardown.sh" > /dev/null 2>&1 || true; fi
}
trap cleanup EXIT

"$CAIRN" up --detach --data "$DATA" --base-port $PORT --osds 6 --mds 0 > /dev/null
CONF=$DATA/cairn.toml
"$CAIRN" pool create rep3 --size 3 --pg-num 32 --failure-domain osd --conf "$CONF" > /dev/null 2>&1 || true
"$CAIRN" pool create ec21 --erasure 2+1 --stripe-unit 4K --pg-num 32 --failure-domain osd --conf "$CONF" > /dev/null
"$CAIRN" pool create ec42 --erasure 4+2 --stripe-unit 4K --pg-num 32 --failure-domain osd --conf "$CONF" > /dev/null

stored() {
  sleep 3  # the next heartbeats carry the OSDs' figures
  "$CAIRN" status --json --conf "$CONF" | python3 -c '
import json, sys
s = json.load(sys.stdin)
print(s["usage"]["stored_bytes"])'
}

echo "| system | pool | object size | objects | written | raw allocated | raw ÷ written |"
echo "|---|---|---:|---:|---:|---:|---:|"
for pool in rep3 ec21 ec42; do
  for size in 4K 64K 4M; do
    case $size in 4K) n=4000 ;; 64K) n=500 ;; 4M) n=16 ;; esac
    before=$(stored)
    "$CAIRN" bench object --conf "$CONF" --pool $pool --mode write --object-size $size \
      --objects $n --concurrency 16 --duration 4s --json > "$WORK/cairn-$pool-$size.json"
    after=$(stored)
    bytes=$(python3 -c "print($n * {'4K': 4096, '64K': 65536, '4M': 4194304}['$size'])")
    python3 -c "
raw = $after - $before
print(f'| Cairn | $pool | $size | $n | {$bytes:,} | {raw:,} | {raw / $bytes:.2f} |')"
    "$CAIRN" bench object --conf "$CONF" --pool $pool --mode rand --duration 100ms --cleanup > /dev/null 2>&1 || true
  done
done

ensure_ceph_pool() {
  if ! ceph osd pool ls | grep -qx "$1"; then
    if [ "$1" = ec21 ]; then
      ceph osd erasure-code-profile set ec21 k=2 m=1 crush-failure-domain=osd > /dev/null
      ceph osd pool create ec21 64 64 erasure ec21 > /dev/null
    else
      ceph osd pool create rep3 64 64 replicated > /dev/null
      ceph osd pool set rep3 size 3 > /dev/null
    fi
    ceph osd pool application enable "$1" rados > /dev/null
  fi
}
for pool in rep3 ec21; do
  ensure_ceph_pool $pool
  for size in 4K 64K 4M; do
    case $size in 4K) n=4000; b=4096 ;; 64K) n=500; b=65536 ;; 4M) n=16; b=4194304 ;; esac
    rados -p $pool cleanup > /dev/null 2>&1 || true
    # rados bench writes as many as it can in the time; count what it wrote.
    rados -p $pool bench 4 write -b $b -t 16 --no-cleanup > "$WORK/ceph-$pool-$size.txt" 2>&1
    sleep 6  # pool statistics reach the manager
    ceph df detail -f json > "$WORK/ceph-df-$pool-$size.json"
    python3 - "$WORK/ceph-df-$pool-$size.json" "$pool" "$size" "$b" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
p = next(p for p in d["pools"] if p["name"] == sys.argv[2])["stats"]
# Ceph's STORED counts an EC object padded to its stripe width: what was
# written is the objects times their size.
used, objects = p["bytes_used"], p["objects"]
written = objects * int(sys.argv[4])
print(f"| Ceph | {sys.argv[2]} | {sys.argv[3]} | {objects} | {written:,} | {used:,} | {used / written:.2f} |")
EOF
    rados -p $pool cleanup > /dev/null 2>&1 || true
  done
done
