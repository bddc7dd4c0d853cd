#!/usr/bin/env bash
# Erasure coding next to replication, Cairn next to Ceph (issue 22's
# recorded measurement): `cairn bench object` and `rados bench` on an EC 2+1
# pool (`ec21`) and a replicated size-3 pool (`rep3`) of each system,
# 4 MiB and 4 KiB writes and random reads, interleaved in one sitting,
# medians over REPEATS rounds; then Cairn's EC random reads with one of its
# three OSDs stopped (degraded: every read of a shard it held decodes it
# from the other two).
#
#   scripts/ec-vs-ceph.sh [REPEATS] [SECONDS]     (default 3 rounds, 10 s)
#
# Same settings on both systems: 3 OSDs on this machine's disk, 64 PGs per
# pool, failure domain osd, 16 operations in flight, default durability
# and checksums, the page cache dropped before every read phase. Cairn's
# EC pool uses a 4 KiB stripe unit, as Ceph's default profile. Needs root.
# Deploys Ceph with ../shared/anchors/ceph/deploy.sh if it is not running
# and tears it down at the end only if it deployed it. Raw results: $OUT
# (default /var/tmp/cairn-ec-bench/results).
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
REPEATS=${1:-3}
RT=${2:-10}
ANCHOR=${ANCHOR:-$HERE/../shared/anchors/ceph}
WORK=${WORK:-/var/tmp/cairn-ec-bench}
OUT=${OUT:-$WORK/results}
DATA=$WORK/cairn
PORT=18350
export CEPH_CONF=/var/tmp/ceph-anchor/ceph.conf
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/cairn-ci-target}

cd "$HERE"
if [ -z "${CAIRN:-}" ]; then
  cargo build --release --quiet --bin cairn
  CAIRN=$CARGO_TARGET_DIR/release/cairn
fi
rm -rf "$OUT" "$DATA"
mkdir -p "$OUT"

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

deployed=0
if ! timeout 10 ceph -s > /dev/null 2>&1; then
  "$ANCHOR/deploy.sh" > "$OUT/ceph-deploy.log" 2>&1
  deployed=1
fi
cleanup() {
  "$CAIRN" down --data "$DATA" > /dev/null 2>&1 || true
  if [ "$deployed" = 1 ]; then "$ANCHOR/teardown.sh" > /dev/null 2>&1 || true; fi
}
trap cleanup EXIT

if ! ceph osd pool ls | grep -qx rep3; then
  ceph osd pool create rep3 64 64 replicated > /dev/null
  ceph osd pool set rep3 size 3 > /dev/null
  ceph osd pool set rep3 min_size 2 > /dev/null
  ceph osd pool application enable rep3 rados > /dev/null
fi
if ! ceph osd pool ls | grep -qx ec21; then
  ceph osd erasure-code-profile set ec21 k=2 m=1 crush-failure-domain=osd > /dev/null
  ceph osd pool create ec21 64 64 erasure ec21 > /dev/null
  ceph osd pool application enable ec21 rados > /dev/null
fi
for _ in $(seq 1 120); do ceph health | grep -q HEALTH_OK && break; sleep 1; done
ceph osd pool ls detail | grep -E "'(rep3|ec21)'" > "$OUT/ceph-pools.txt"

"$CAIRN" up --detach --data "$DATA" --base-port $PORT --mds 0 --down-grace 2s > "$OUT/cairn-up.txt"
CONF=$DATA/cairn.toml
"$CAIRN" pool create rep3 --size 3 --min-size 2 --pg-num 64 --failure-domain osd --conf "$CONF" > /dev/null
"$CAIRN" pool create ec21 --erasure 2+1 --stripe-unit 4K --pg-num 64 --failure-domain osd --conf "$CONF" > "$OUT/cairn-pools.txt"

rados_run() {  # label, pool, rados bench args...
  local label=$1 pool=$2; shift 2
  rados -p "$pool" bench "$RT" "$@" -t 16 > "$OUT/$label.txt" 2>&1
}
cairn_run() {  # label, pool, cairn bench object args...; a failed phase is kept and reported
  local label=$1 pool=$2; shift 2
  "$CAIRN" bench object --conf "$CONF" --pool "$pool" --concurrency 16 --json "$@" \
    > "$OUT/$label.json" 2> "$OUT/$label.err" || echo "  $label failed: $(tail -1 "$OUT/$label.err")"
}
osds_up() {
  "$CAIRN" osd tree --json --conf "$CONF" | python3 -c '
import json, sys
t = json.load(sys.stdin)
print(sum(1 for r in t["racks"] for h in r["hosts"] for o in h["osds"] if o["up"]))'
}
wait_up() {  # count
  for _ in $(seq 1 120); do [ "$(osds_up)" = "$1" ] && return 0; sleep 0.5; done
  echo "OSDs up never reached $1" >&2; return 1
}
wait_clean() {
  for _ in $(seq 1 240); do
    "$CAIRN" status --json --conf "$CONF" | python3 -c '
import json, sys
s = json.load(sys.stdin)
sys.exit(0 if list(s["pgs_by_state"]) == ["active+clean"] else 1)' && return 0
    sleep 0.5
  done
  echo "never clean" >&2; return 1
}

# Each object size writes a bounded set of names, so a round's data fits
# the shared disk: 4 MiB objects 400 names, 4 KiB objects 20,000.
for round in $(seq 1 "$REPEATS"); do
  for pool in rep3 ec21; do
    for size in 4M 4K; do
      if [ $size = 4M ]; then bytes=4194304; names=400; else bytes=4096; names=20000; fi
      echo "round $round of $REPEATS: $pool $size"
      if [ $((round % 2)) = 1 ]; then
        cairn_run "r${round}_cairn_${pool}_write_$size" $pool --mode write --object-size $size --objects $names --duration "${RT}s"
        rados_run "r${round}_ceph_${pool}_write_$size" $pool write -b $bytes --no-cleanup
      else
        rados_run "r${round}_ceph_${pool}_write_$size" $pool write -b $bytes --no-cleanup
        cairn_run "r${round}_cairn_${pool}_write_$size" $pool --mode write --object-size $size --objects $names --duration "${RT}s"
      fi
      drop; rados_run "r${round}_ceph_${pool}_rand_$size" $pool rand
      drop; cairn_run "r${round}_cairn_${pool}_rand_$size" $pool --mode rand --duration "${RT}s"
      if [ $pool = ec21 ]; then
        # One OSD of three stopped: every read of its shards decodes them.
        # A 2+1 PG with 2 shards is below its default min_size (3), and
        # serves nothing, as in Ceph; min_size 2 keeps it serving.
        "$CAIRN" pool set ec21 --min-size 2 --conf "$CONF" > /dev/null
        "$CAIRN" daemon stop osd.2 --data "$DATA" > /dev/null
        wait_up 2
        sleep 3
        drop; cairn_run "r${round}_cairn_${pool}_degraded_rand_$size" $pool --mode rand --duration "${RT}s"
        "$CAIRN" daemon start osd.2 --data "$DATA" > /dev/null
        wait_up 3
        wait_clean
        "$CAIRN" pool set ec21 --min-size 3 --conf "$CONF" > /dev/null
      fi
      cairn_run "r${round}_cairn_${pool}_cleanup_$size" $pool --mode rand --duration 100ms --cleanup
      rados -p $pool cleanup > /dev/null 2>&1
    done
  done
done
ceph df detail > "$OUT/ceph-df.txt" 2>&1 || true

python3 - "$OUT" "$REPEATS" <<'EOF'
import json, re, statistics, sys
out, repeats = sys.argv[1], int(sys.argv[2])
rounds = range(1, repeats + 1)
def rados(label, unit):
    try:
        t = open(f"{out}/{label}.txt").read()
        bw = float(re.search(r"Bandwidth \(MB/sec\):\s+([\d.]+)", t).group(1))
        iops = float(re.search(r"Average IOPS:\s+([\d.]+)", t).group(1))
    except (OSError, AttributeError):
        return None
    return bw if unit == "MiB/s" else iops
def cairn(label, unit):
    try:
        j = json.load(open(f"{out}/{label}.json"))
    except (OSError, ValueError):
        return None
    if j["errors"]:
        return None
    return j["bandwidth_mib_per_sec"] if unit == "MiB/s" else j["iops"]
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")
print("| workload | unit | Ceph rep3 | Ceph ec21 | Cairn rep3 | Cairn ec21 | Cairn ec21 ÷ Ceph ec21 | Cairn ec21 ÷ Cairn rep3 |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for size, kind, unit in [("4M", "write", "MiB/s"), ("4M", "rand", "MiB/s"), ("4K", "write", "IOPS"), ("4K", "rand", "IOPS")]:
    v = {}
    for sysname, f in [("ceph", rados), ("cairn", cairn)]:
        for pool in ["rep3", "ec21"]:
            v[sysname, pool] = [f(f"r{r}_{sysname}_{pool}_{kind}_{size}", unit) for r in rounds]
    ratio_ceph = med([a / b for a, b in zip(v["cairn", "ec21"], v["ceph", "ec21"]) if a and b])
    ratio_rep = med([a / b for a, b in zip(v["cairn", "ec21"], v["cairn", "rep3"]) if a and b])
    name = f"{'4 MiB' if size == '4M' else '4 KiB'} {'write' if kind == 'write' else 'random read'}"
    print(f"| {name} | {unit} | {med(v['ceph','rep3']):,.1f} | {med(v['ceph','ec21']):,.1f} | "
          f"{med(v['cairn','rep3']):,.1f} | {med(v['cairn','ec21']):,.1f} | {ratio_ceph:.2f} | {ratio_rep:.2f} |")
print()
for size, unit in [("4M", "MiB/s"), ("4K", "IOPS")]:
    healthy = [cairn(f"r{r}_cairn_ec21_rand_{size}", unit) for r in rounds]
    degraded = [cairn(f"r{r}_cairn_ec21_degraded_rand_{size}", unit) for r in rounds]
    ratios = [d / h for h, d in zip(healthy, degraded) if h and d]
    print(f"Cairn ec21 {size} random reads with one OSD of three stopped: {med(degraded):,.1f} {unit}, "
          f"{med(ratios):.2f} of healthy (per round {', '.join(f'{x:.2f}' for x in ratios)})")
EOF
