#!/usr/bin/env bash
# Cairn's `cairn bench object` next to Ceph's `rados bench` and fio on the
# raw disk, interleaved in one sitting, medians over REPEATS rounds (issue 4's
# recorded measurement). Same settings on both systems: 3 OSDs on this
# machine's disk, a replicated pool of size 3 / min_size 2 with 64 PGs,
# 16 operations in flight, default durability and checksums, the page cache
# dropped before every read phase.
#
#   scripts/cluster-vs-ceph.sh [REPEATS] [SECONDS]     (default 3 rounds, 20 s)
#
# Needs root (drop_caches, Ceph's loop devices). Deploys Ceph with
# ../shared/anchors/ceph/deploy.sh if it is not running and tears it down at
# the end only if it deployed it. Raw results: $OUT (default
# /var/tmp/cairn-cluster-bench/results).
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
REPEATS=${1:-3}
RT=${2:-20}
ANCHOR=${ANCHOR:-$HERE/../shared/anchors/ceph}
WORK=${WORK:-/var/tmp/cairn-cluster-bench}
OUT=${OUT:-$WORK/results}
DATA=$WORK/cairn
RAW=$WORK/raw
PORT=18300
export CEPH_CONF=/var/tmp/ceph-anchor/ceph.conf
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/cairn-ci-target}

cd "$HERE"
cargo build --release --quiet
CAIRN=$CARGO_TARGET_DIR/release/cairn
rm -rf "$OUT" "$DATA" "$RAW"
mkdir -p "$OUT" "$RAW"

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

deployed=0
if ! timeout 10 ceph -s > /dev/null 2>&1; then
  "$ANCHOR/deploy.sh" > "$OUT/ceph-deploy.log" 2>&1
  deployed=1
fi
cleanup() {
  "$CAIRN" down --data "$DATA" > /dev/null 2>&1 || true
  [ -n "${RSS_PID:-}" ] && kill "$RSS_PID" 2> /dev/null || true
  if [ "$deployed" = 1 ]; then "$ANCHOR/teardown.sh" > /dev/null 2>&1 || true; fi
}
trap cleanup EXIT

if ! ceph osd pool ls | grep -qx rep3; then
  ceph osd pool create rep3 64 64 replicated > /dev/null
  ceph osd pool set rep3 size 3 > /dev/null
  ceph osd pool set rep3 min_size 2 > /dev/null
  ceph osd pool application enable rep3 rados > /dev/null
fi
for _ in $(seq 1 120); do ceph health | grep -q HEALTH_OK && break; sleep 1; done

up_started=$(date +%s.%N)
"$CAIRN" up --detach --data "$DATA" --base-port $PORT > "$OUT/cairn-up.txt"
up_done=$(date +%s.%N)
echo "cairn_up_seconds $(echo "$up_done - $up_started" | bc)" >> "$OUT/up.txt"
CONF=$DATA/cairn.toml
"$CAIRN" pool create bench --size 3 --min-size 2 --pg-num 64 --conf "$CONF" > /dev/null

# Resident memory of every Cairn OSD, sampled each second.
( while :; do
    for f in "$DATA"/run/osd.*.pid; do
      [ -e "$f" ] || continue
      r=$(ps -o rss= -p "$(cat "$f")" 2> /dev/null | tr -d ' ')
      [ -n "$r" ] && echo "$(date +%s),$(basename "$f" .pid),$r"
    done
    sleep 1
  done >> "$OUT/cairn-rss.csv" ) &
RSS_PID=$!

fio_run() {  # label, fio args...
  local label=$1; shift
  fio --name="$label" --output-format=json --filename="$RAW/fio.dat" --size=4G \
    --ioengine=libaio --direct=1 --runtime="$RT" --time_based --group_reporting "$@" \
    > "$OUT/$label.json" 2> "$OUT/$label.err"
}
rados_run() {  # label, rados bench args...
  local label=$1; shift
  rados -p rep3 bench "$RT" "$@" -t 16 > "$OUT/$label.txt" 2>&1
}
cairn_run() {  # label, cairn bench object args...; a failed phase is kept and reported
  local label=$1; shift
  "$CAIRN" bench object --conf "$CONF" --pool bench --concurrency 16 --json "$@" \
    > "$OUT/$label.json" 2> "$OUT/$label.err" || echo "  $label failed: $(tail -1 "$OUT/$label.err")"
}

# The disk under this VM changes speed from minute to minute, so each round
# brackets both systems' 4 MiB write phases with fio's (the raw figure is
# the mean of the two), and the system that goes first alternates.
ceph_write_4M() { rados_run "r${round}_ceph_write_4M" write -b 4194304 --no-cleanup; }
cairn_write_4M() { cairn_run "r${round}_cairn_write_4M" --mode write --object-size 4M --duration "${RT}s"; }
for round in $(seq 1 "$REPEATS"); do
  echo "round $round of $REPEATS: 4 MiB writes (fio, both systems, fio)"
  fio_run "r${round}_fio_write_4M" --rw=write --bs=4M --iodepth=16
  # The same with a flush after every 16 writes: what the disk takes when
  # writes must be durable (a host with a write-back cache under the VM's
  # disk shows the difference).
  fio_run "r${round}_fio_write_4M_flushed" --rw=write --bs=4M --iodepth=16 --fdatasync=16
  rm -f "$RAW/fio.dat"
  if [ $((round % 2)) = 1 ]; then cairn_write_4M; ceph_write_4M; else ceph_write_4M; cairn_write_4M; fi
  fio_run "r${round}_fio_write_4M_after" --rw=write --bs=4M --iodepth=16

  echo "round $round of $REPEATS: 4 MiB reads"
  drop; fio_run "r${round}_fio_read_4M" --rw=read --bs=4M --iodepth=16
  rm -f "$RAW/fio.dat"
  drop; rados_run "r${round}_ceph_seq_4M" seq
  drop; cairn_run "r${round}_cairn_seq_4M" --mode seq
  drop; rados_run "r${round}_ceph_rand_4M" rand
  drop; cairn_run "r${round}_cairn_rand_4M" --mode rand --duration "${RT}s" --cleanup
  rados -p rep3 cleanup > /dev/null 2>&1

  echo "round $round of $REPEATS: 4 KiB"
  fio_run "r${round}_fio_randwrite_4k_qd1" --rw=randwrite --bs=4k --iodepth=1 --sync=1
  rm -f "$RAW/fio.dat"
  rados_run "r${round}_ceph_write_4K" write -b 4096 --no-cleanup
  cairn_run "r${round}_cairn_write_4K" --mode write --object-size 4K --duration "${RT}s"
  drop; rados_run "r${round}_ceph_rand_4K" rand
  drop; cairn_run "r${round}_cairn_rand_4K" --mode rand --duration "${RT}s" --cleanup
  rados -p rep3 cleanup > /dev/null 2>&1
done

python3 - "$OUT" "$REPEATS" <<'EOF'
import json, re, statistics, sys, glob, os, csv
out, repeats = sys.argv[1], int(sys.argv[2])
def fio(label, d):
    j = json.load(open(f"{out}/{label}.json"))["jobs"][0][d]
    return j["bw_bytes"] / 1048576, j["iops"]
def rados(label):
    t = open(f"{out}/{label}.txt").read()
    bw = float(re.search(r"Bandwidth \(MB/sec\):\s+([\d.]+)", t).group(1))
    iops = float(re.search(r"Average IOPS:\s+([\d.]+)", t).group(1))
    return bw, iops  # rados bench's "MB/sec" is MiB/s (bytes / 1048576)
def cairn(label):
    # A phase that failed or saw errors (e.g. the shared disk filled up)
    # does not count.
    try:
        j = json.load(open(f"{out}/{label}.json"))
    except (OSError, ValueError):
        return None
    return None if j["errors"] else (j["bandwidth_mib_per_sec"], j["iops"])
rows = [
    ("4 MiB write", "MiB/s", lambda r: rados(f"r{r}_ceph_write_4M")[0], lambda r: pick(cairn(f"r{r}_cairn_write_4M"), 0)),
    ("4 MiB seq read", "MiB/s", lambda r: rados(f"r{r}_ceph_seq_4M")[0], lambda r: pick(cairn(f"r{r}_cairn_seq_4M"), 0)),
    ("4 MiB rand read", "MiB/s", lambda r: rados(f"r{r}_ceph_rand_4M")[0], lambda r: pick(cairn(f"r{r}_cairn_rand_4M"), 0)),
    ("4 KiB write", "IOPS", lambda r: rados(f"r{r}_ceph_write_4K")[1], lambda r: pick(cairn(f"r{r}_cairn_write_4K"), 1)),
    ("4 KiB rand read", "IOPS", lambda r: rados(f"r{r}_ceph_rand_4K")[1], lambda r: pick(cairn(f"r{r}_cairn_rand_4K"), 1)),
]
rounds = range(1, repeats + 1)
def pick(result, index):
    return None if result is None else result[index]
print(f"| workload | unit | Ceph (median) | Cairn (median) | Cairn ÷ Ceph (median of per-round ratios) | per-round ratios (rounds where Cairn ran without errors) |")
print("|---|---|---:|---:|---:|---|")
for name, unit, ceph, cai in rows:
    pairs = [(ceph(r), cai(r)) for r in rounds]
    pairs = [(a, b) for a, b in pairs if b is not None]
    c = [a for a, _ in pairs]; k = [b for _, b in pairs]
    ratios = [b / a for a, b in pairs]
    print(f"| {name} | {unit} | {statistics.median(c):,.1f} | {statistics.median(k):,.1f} | "
          f"{statistics.median(ratios):.2f} | {', '.join(f'{x:.2f}' for x in ratios)} |")
# Raw writes: the mean of the runs before and after the systems' write
# phases.
fw = [(fio(f"r{r}_fio_write_4M", "write")[0] + fio(f"r{r}_fio_write_4M_after", "write")[0]) / 2
      for r in rounds]
fr = [fio(f"r{r}_fio_read_4M", "read")[0] for r in rounds]
cw = [pick(cairn(f"r{r}_cairn_write_4M"), 0) for r in rounds]
print()
print(f"raw disk (fio, direct, 4 MiB, qd 16): write {statistics.median(fw):,.1f} MiB/s (before and after the systems' writes), "
      f"read {statistics.median(fr):,.1f} MiB/s (medians; per round write {', '.join(f'{x:.0f}' for x in fw)})")
ratio = [c / (f / 3) for c, f in zip(cw, fw) if c is not None]
print(f"Cairn 4 MiB write ÷ (raw write ÷ 3): median {statistics.median(ratio):.2f} "
      f"(per round {', '.join(f'{x:.2f}' for x in ratio)})")
fd = [fio(f"r{r}_fio_write_4M_flushed", "write")[0] for r in rounds]
ratio = [c / (f / 3) for c, f in zip(cw, fd) if c is not None]
print(f"raw disk with an fdatasync every 16 writes: write {statistics.median(fd):,.1f} MiB/s "
      f"(per round {', '.join(f'{x:.0f}' for x in fd)}); Cairn 4 MiB write ÷ (that ÷ 3): "
      f"median {statistics.median(ratio):.2f} (per round {', '.join(f'{x:.2f}' for x in ratio)})")
rss = {}
for row in csv.reader(open(f"{out}/cairn-rss.csv")):
    rss[row[1]] = max(rss.get(row[1], 0), int(row[2]) / 1024)
print("Cairn OSD resident memory, max over the run (MiB): " +
      ", ".join(f"{k} {v:.0f}" for k, v in sorted(rss.items())))
print(open(f"{out}/up.txt").read().strip())
EOF
