#!/usr/bin/env bash
# Sequential 4 MiB writes through a Cairn mount next to `cairn bench object`
# 4 MiB writes on the file system's data pool, in one sitting, rounds
# interleaved, medians and the ratio printed (issue 21: the mount's
# sequential write should reach 70% of the object bench's).
#
#   cairn up --data /var/tmp/fs-vs-object --base-port 19800 --detach
#   cairn mount --conf /var/tmp/fs-vs-object/cairn.toml /mnt/cairn &
#   scripts/bench-fs-vs-object.sh /var/tmp/fs-vs-object/cairn.toml /mnt/cairn
#
# env: ROUNDS (3), RT (20 s per phase), SIZE (2G per fio job), POOL
# (cairnfs.data), CAIRN (the binary). Both at default durability: fio ends
# each job with fsync; the object bench's writes are acknowledged durable.
set -euo pipefail
CONF=${1:?client config}
DIR=${2:?Cairn mount}
ROUNDS=${ROUNDS:-3}
RT=${RT:-20}
SIZE=${SIZE:-2G}
POOL=${POOL:-cairnfs.data}
CAIRN=${CAIRN:-$(dirname "$0")/../target/release/cairn}
OUT=${OUT:-/var/tmp/bench-fs-vs-object}
mkdir -p "$OUT"
: > "$OUT/results.txt"
fio_mib() {  # name extra-args...
  local name=$1; shift
  rm -f "$DIR/fio-$name"*
  sync; echo 3 > /proc/sys/vm/drop_caches
  fio --name="fio-$name" --directory="$DIR" --rw=write --bs=4M --size="$SIZE" \
    --end_fsync=1 --runtime="$RT" --time_based=0 --output-format=json "$@" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["write"]["bw"]/1024)'
  rm -f "$DIR/fio-$name"*
}
for round in $(seq 1 "$ROUNDS"); do
  obj=$("$CAIRN" bench object --conf "$CONF" --pool "$POOL" --mode write \
    --object-size 4M --concurrency 16 --duration "${RT}s" --cleanup --json \
    | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["bandwidth_mib_per_sec"])')
  echo "object $round $obj" | tee -a "$OUT/results.txt"
  buffered=$(fio_mib buffered --ioengine=psync)
  echo "buffered $round $buffered" | tee -a "$OUT/results.txt"
  direct=$(fio_mib direct --ioengine=libaio --iodepth=16 --direct=1)
  echo "direct $round $direct" | tee -a "$OUT/results.txt"
done
python3 - "$OUT/results.txt" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    kind, _, value = line.split()
    rows.setdefault(kind, []).append(float(value))
med = {k: statistics.median(v) for k, v in rows.items()}
for k in ("object", "buffered", "direct"):
    print("%-9s median %7.1f MiB/s  (%s)" % (k, med[k], ", ".join("%.1f" % v for v in rows[k])))
for k in ("buffered", "direct"):
    print("%s write / object bench write: %.2f" % (k, med[k] / med["object"]))
PY
