#!/usr/bin/env bash
# Two builds of Cairn side by side on this machine's disk, interleaved in
# one sitting: each round starts a fresh 3-OSD cluster (size-3 pool, 64
# PGs) with build A, then with build B, and runs `cairn bench object` at 16
# in flight: 4 MiB writes, 4 MiB sequential reads, 4 KiB writes, 4 KiB
# random reads (page cache dropped before every read phase). Prints each
# build's medians and B ÷ A, the check that a change does not regress.
#
#   scripts/object-ab.sh A_BIN B_BIN [ROUNDS] [SECONDS]   (default 3 rounds, 10 s)
#
# Needs root (drop_caches). Raw results: $OUT (default
# /var/tmp/cairn-object-ab/results).
set -euo pipefail

A=$1
B=$2
ROUNDS=${3:-3}
RT=${4:-10}
WORK=${WORK:-/var/tmp/cairn-object-ab}
OUT=${OUT:-$WORK/results}
PORT=${PORT:-18900}
rm -rf "$OUT"
mkdir -p "$OUT"

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

one() {  # build label, binary, round
  local label=$1 bin=$2 round=$3 data=$WORK/data-$1
  rm -rf "$data"
  "$bin" up --detach --data "$data" --osds 3 --base-port "$PORT" > /dev/null
  local conf=$data/cairn.toml
  "$bin" pool create bench --size 3 --min-size 2 --pg-num 64 --conf "$conf" > /dev/null
  run() {  # phase, args...
    local phase=$1; shift
    "$bin" bench object --conf "$conf" --pool bench --concurrency 16 --json "$@" \
      > "$OUT/r${round}_${label}_${phase}.json" 2> "$OUT/r${round}_${label}_${phase}.err" \
      || echo "  r${round} ${label} ${phase} failed: $(tail -1 "$OUT/r${round}_${label}_${phase}.err")"
  }
  run write_4M --mode write --object-size 4M --duration "${RT}s"
  drop; run seq_4M --mode seq --duration "${RT}s" --cleanup
  run write_4K --mode write --object-size 4K --duration "${RT}s"
  drop; run rand_4K --mode rand --duration "${RT}s" --cleanup
  "$bin" down --data "$data" > /dev/null 2>&1 || true
  rm -rf "$data"
}

for round in $(seq 1 "$ROUNDS"); do
  # The build that goes first alternates, so drift on the shared disk
  # does not favour one.
  if [ $((round % 2)) = 1 ]; then order="A B"; else order="B A"; fi
  for label in $order; do
    echo "round $round: build $label"
    if [ "$label" = A ]; then one A "$A" "$round"; else one B "$B" "$round"; fi
  done
done

python3 - "$OUT" "$ROUNDS" << 'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def figure(label, phase, r):
    try:
        d = json.load(open(f"{out}/r{r}_{label}_{phase}.json"))
    except (OSError, ValueError):
        return None
    if d.get("errors"):
        return None  # a phase that saw errors does not count
    key = "bandwidth_mib_per_sec" if phase.endswith("4M") else "iops"
    return d.get(key)
print(f"{'phase':10} {'A':>10} {'B':>10} {'B/A':>6}   per round (A/B)")
for phase in ["write_4M", "seq_4M", "write_4K", "rand_4K"]:
    a = [figure("A", phase, r) for r in range(1, rounds + 1)]
    b = [figure("B", phase, r) for r in range(1, rounds + 1)]
    av = [x for x in a if x is not None]
    bv = [x for x in b if x is not None]
    if not av or not bv:
        print(f"{phase:10} missing")
        continue
    ma, mb = statistics.median(av), statistics.median(bv)
    rounds_txt = ", ".join(f"{x:.0f}/{y:.0f}" for x, y in zip(a, b) if x and y)
    print(f"{phase:10} {ma:10.1f} {mb:10.1f} {mb / ma:6.2f}   {rounds_txt}")
EOF
