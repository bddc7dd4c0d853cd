#!/usr/bin/env bash
# What a Cairn mount does next to what the object layer under it does, in
# one sitting, rounds interleaved, medians and ratios printed (issue 21):
#
#   seq-write  fio 4 MiB sequential writes (buffered and O_DIRECT qd 16)
#              next to `cairn bench object` 4 MiB writes on the data pool
#              (goal: the mount's writes at 70% of the object bench's);
#   seq-read   fio 4 MiB sequential reads (buffered, and O_DIRECT qd 16)
#              next to `cairn bench object --mode seq` 4 MiB reads;
#   small      mdtest-hard creates (3,901-byte files, one directory, 1 and
#              8 processes, `cairn bench fs`) next to `cairn bench object`
#              4 KiB writes at 16 in flight: each such file is one object
#              write, so the object bench is the ceiling of its creates.
#
#   cairn up --data /var/tmp/fs-vs-object --base-port 19800 --detach
#   cairn mount --conf /var/tmp/fs-vs-object/cairn.toml /mnt/cairn &
#   scripts/bench-fs-vs-object.sh /var/tmp/fs-vs-object/cairn.toml /mnt/cairn
#
# env: PARTS (seq-write,seq-read,small), ROUNDS (3), RT (20 s per phase),
# SIZE (2G per fio job), FILES (10000 per mdtest run), POOL
# (cairnfs.data), CAIRN (the binary), OUT. All at default durability: fio
# ends each write job with fsync; the object bench's writes are
# acknowledged durable; caches are dropped before every phase.
set -euo pipefail
CONF=${1:?client config}
DIR=${2:?Cairn mount}
PARTS=${PARTS:-seq-write,seq-read,small}
ROUNDS=${ROUNDS:-3}
RT=${RT:-20}
SIZE=${SIZE:-2G}
FILES=${FILES:-10000}
POOL=${POOL:-cairnfs.data}
CAIRN=${CAIRN:-$(dirname "$0")/../target/release/cairn}
OUT=${OUT:-/var/tmp/bench-fs-vs-object}
mkdir -p "$OUT"
: > "$OUT/results.txt"
has() { [[ ",$PARTS," == *",$1,"* ]]; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
fio_mib() {  # rw name extra-args... (MiB/s of the job's direction)
  local rw=$1 name=$2; shift 2
  drop
  fio --name="fio-$name" --directory="$DIR" --rw="$rw" --bs=4M --size="$SIZE" \
    --end_fsync=1 --runtime="$RT" --time_based=0 --output-format=json "$@" \
    | python3 -c "import json,sys; print(json.load(sys.stdin)['jobs'][0]['$([[ $rw == read ]] && echo read || echo write)']['bw']/1024)"
}
object() {  # mode size [extra...] -> the bench's JSON
  local mode=$1 size=$2; shift 2
  drop
  "$CAIRN" bench object --conf "$CONF" --pool "$POOL" --mode "$mode" \
    --object-size "$size" --concurrency 16 --duration "${RT}s" --json "$@"
}
record() { echo "$1 $2 $3" | tee -a "$OUT/results.txt"; }
for round in $(seq 1 "$ROUNDS"); do
  if has seq-write; then
    record object-write "$round" "$(object write 4M --cleanup | python3 -c 'import json,sys; print(json.load(sys.stdin)["bandwidth_mib_per_sec"])')"
    rm -f "$DIR"/fio-*
    record fio-write-buffered "$round" "$(fio_mib write buffered --ioengine=psync)"
    rm -f "$DIR"/fio-*
    record fio-write-direct "$round" "$(fio_mib write direct --ioengine=libaio --iodepth=16 --direct=1)"
    rm -f "$DIR"/fio-*
  fi
  if has seq-read; then
    # 2 GiB to read back, as fio's file (written whole before the reads).
    object write 4M --objects 512 > /dev/null
    record object-seq-read "$round" "$(object seq 4M --cleanup | python3 -c 'import json,sys; print(json.load(sys.stdin)["bandwidth_mib_per_sec"])')"
    rm -f "$DIR"/fio-*
    fio_mib write layout --ioengine=psync > /dev/null
    record fio-read-buffered "$round" "$(fio_mib read layout --ioengine=psync)"
    record fio-read-direct "$round" "$(fio_mib read layout --ioengine=libaio --iodepth=16 --direct=1)"
    rm -f "$DIR"/fio-*
  fi
  if has small; then
    record object-write-4k "$round" "$(object write 4K --cleanup | python3 -c 'import json,sys; print(json.load(sys.stdin)["iops"])')"
    for procs in 1 8; do
      d="$DIR/small-r$round-p$procs"
      mkdir -p "$d"
      "$CAIRN" bench fs --dir "$d" --procs "$procs" --files-per-proc $((FILES / procs)) \
        --phases mdtest-hard --drop-caches --json > "$OUT/small-r$round-p$procs.json"
      record "mdtest-hard-create-p$procs" "$round" "$(python3 -c "
import json
d=json.load(open('$OUT/small-r$round-p$procs.json'))
print(next(p['ops_per_sec'] for p in d['phases'] if p['phase']=='mdtest-hard-create'))")"
      rmdir "$d" 2>/dev/null || true
    done
  fi
done
python3 - "$OUT/results.txt" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    kind, _, value = line.split()
    rows.setdefault(kind, []).append(float(value))
med = {k: statistics.median(v) for k, v in rows.items()}
for k, v in rows.items():
    print("%-22s median %9.1f  (%s)" % (k, med[k], ", ".join("%.1f" % x for x in v)))
def ratio(a, b):
    if a in med and b in med:
        print("%s / %s: %.2f" % (a, b, med[a] / med[b]))
ratio("fio-write-buffered", "object-write")
ratio("fio-write-direct", "object-write")
ratio("fio-read-buffered", "object-seq-read")
ratio("fio-read-direct", "object-seq-read")
ratio("mdtest-hard-create-p1", "object-write-4k")
ratio("mdtest-hard-create-p8", "object-write-4k")
PY
