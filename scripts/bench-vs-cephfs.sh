#!/usr/bin/env bash
# Cairn's file system next to CephFS (ceph-fuse) on this machine, in one
# sitting, rounds interleaved, medians printed with Cairn ÷ CephFS ratios.
#
#   ../shared/anchors/ceph/deploy.sh            (RGW=0 is enough; CephFS at /mnt/cephfs)
#   cairn up --base-port 16789 --data /var/tmp/cairn-vs   (Ceph's monitor has 6789)
#   cairn mount --conf /var/tmp/cairn-vs/cairn.toml /mnt/cairn &
#   scripts/bench-vs-cephfs.sh /mnt/cairn /mnt/cephfs
#
# env: ROUNDS (3), FILES (10000 files for 1 process), PROCS (8),
# FILES_PER_PROC (FILES / PROCS, for the PROCS run), RT (20 s per
# timed fio job), FIO_SIZE (1G), OUT (/var/tmp/bench-vs-cephfs), PARTS
# (mdtest,fio: the mdtest phases, then every fio job; fio-buffered runs only
# the buffered sequential ones).
# Both sides: data pools replicated size 3, default durability; the page
# cache is dropped before each read phase, and ceph-fuse (whose own object
# cache drop_caches does not reach) is remounted before each read phase.
set -euo pipefail
CAIRN_DIR=${1:?Cairn mount}
CEPH_DIR_MNT=${2:?CephFS mount}
ROUNDS=${ROUNDS:-3}
FILES=${FILES:-10000}
PROCS=${PROCS:-8}
RT=${RT:-20}
FIO_SIZE=${FIO_SIZE:-1G}
OUT=${OUT:-/var/tmp/bench-vs-cephfs}
PARTS=${PARTS:-mdtest,fio}
FILES_PER_PROC=${FILES_PER_PROC:-$((FILES / PROCS))}
has_part() { case ",$PARTS," in *",$1,"*) return 0;; *) return 1;; esac; }
CAIRN=${CAIRN:-$(dirname "$0")/../target/release/cairn}
CEPH_CONF_DIR=${CEPH_ANCHOR:-/var/tmp/ceph-anchor}
mkdir -p "$OUT"
: > "$OUT/results.jsonl"

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
remount_cephfs() {
  fusermount -u "$CEPH_DIR_MNT"
  for _ in $(seq 1 30); do
    [ -e "$CEPH_CONF_DIR/run/ceph-fuse.pid" ] && kill -0 "$(cat "$CEPH_CONF_DIR/run/ceph-fuse.pid")" 2>/dev/null || break
    sleep 1
  done
  CEPH_CONF=$CEPH_CONF_DIR/ceph.conf ceph-fuse --id admin -m 127.0.0.1:6789 \
    --pid-file "$CEPH_CONF_DIR/run/ceph-fuse.pid" "$CEPH_DIR_MNT" >/dev/null 2>&1
  for _ in $(seq 1 30); do mountpoint -q "$CEPH_DIR_MNT" && return 0; sleep 1; done
  echo "ceph-fuse did not mount again" >&2; exit 1
}
before_read() {  # $1 system
  drop
  if [ "$1" = cephfs ]; then remount_cephfs; fi
}
record() {  # system round metric value
  printf '{"system":"%s","round":%s,"metric":"%s","value":%s}\n' "$1" "$2" "$3" "$4" >> "$OUT/results.jsonl"
}
mdtest() {  # system dir round procs files
  local json
  json=$("$CAIRN" bench fs --dir "$2" --procs "$4" --files-per-proc "$5" \
    --phases mdtest-easy,mdtest-hard --json)
  echo "$json" > "$OUT/mdtest-$1-r$3-p$4.json"
  python3 - "$1" "$3" "$4" "$OUT/mdtest-$1-r$3-p$4.json" >> "$OUT/results.jsonl" <<'EOF'
import json, sys
system, rnd, procs, path = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
doc = json.load(open(path))
for phase in doc["phases"]:
    if phase.get("ops_per_sec"):
        print(json.dumps({"system": system, "round": int(rnd),
                          "metric": "%s p%s ops/s" % (phase["phase"], procs),
                          "value": phase["ops_per_sec"]}))
EOF
}
fio_job() {  # system round label dir fio-args...
  local system=$1 round=$2 label=$3 dir=$4; shift 4
  fio --name="$label" --filename="$dir/fio-$label.dat" --size="$FIO_SIZE" \
    --group_reporting --output-format=json "$@" > "$OUT/fio-$system-r$round-$label.json"
  python3 - "$system" "$round" "$label" "$OUT/fio-$system-r$round-$label.json" >> "$OUT/results.jsonl" <<'EOF'
import json, sys
system, rnd, label, path = sys.argv[1:5]
txt = open(path).read(); job = json.loads(txt[txt.index("{"):])["jobs"][0]
for d in ("read", "write"):
    if job[d]["io_bytes"] > 0:
        bw = job[d]["bw_bytes"] / 2**20
        value = job[d]["iops"] if "4k" in label else bw
        unit = "IOPS" if "4k" in label else "MiB/s"
        print(json.dumps({"system": system, "round": int(rnd),
                          "metric": "fio %s %s" % (label, unit), "value": value}))
EOF
}
fio_all() {  # system dir round
  local s=$1 d=$2/fio r=$3
  mkdir -p "$d"
  fio_job "$s" "$r" seqwrite-4M-buffered "$d" --ioengine=psync --direct=0 --rw=write --bs=4M --end_fsync=1
  before_read "$s"
  fio_job "$s" "$r" seqread-4M-buffered "$d" --ioengine=psync --direct=0 --rw=read --bs=4M
  rm -f "$d"/fio-*.dat
  if ! has_part fio; then rm -rf "$d"; return; fi
  fio_job "$s" "$r" seqwrite-4M-direct "$d" --ioengine=libaio --direct=1 --iodepth=16 --rw=write --bs=4M --end_fsync=1
  before_read "$s"
  fio_job "$s" "$r" seqread-4M-direct "$d" --ioengine=libaio --direct=1 --iodepth=16 --rw=read --bs=4M
  rm -f "$d"/fio-*.dat
  fio_job "$s" "$r" randwrite-4k-qd16 "$d" --ioengine=libaio --direct=1 --iodepth=16 --rw=randwrite --bs=4k \
    --runtime="$RT" --time_based --end_fsync=1
  before_read "$s"
  fio_job "$s" "$r" randread-4k-qd16 "$d" --ioengine=libaio --direct=1 --iodepth=16 --rw=randread --bs=4k \
    --runtime="$RT" --time_based
  rm -rf "$d"
}

for round in $(seq 1 "$ROUNDS"); do
  for system in cairn cephfs; do
    if [ "$system" = cairn ]; then dir=$CAIRN_DIR; else dir=$CEPH_DIR_MNT; fi
    echo "== round $round: $system ($(cut -d' ' -f1-3 /proc/loadavg))"
    if has_part mdtest; then
      mdtest "$system" "$dir" "$round" 1 "$FILES"
      mdtest "$system" "$dir" "$round" "$PROCS" "$FILES_PER_PROC"
    fi
    if has_part fio || has_part fio-buffered; then fio_all "$system" "$dir" "$round"; fi
  done
done

python3 - "$OUT/results.jsonl" <<'EOF' | tee "$OUT/summary.md"
import json, sys, statistics, collections
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = collections.defaultdict(list)
for r in rows:
    by[(r["metric"], r["system"])].append(r["value"])
metrics = sorted({r["metric"] for r in rows}, key=lambda m: (not m.startswith("mdtest"), m))
print("| metric | Cairn (median) | CephFS (median) | Cairn ÷ CephFS |")
print("|---|---|---|---|")
for m in metrics:
    c, f = by.get((m, "cairn"), []), by.get((m, "cephfs"), [])
    if not c or not f:
        continue
    mc, mf = statistics.median(c), statistics.median(f)
    print("| %s | %.0f | %.0f | %.2f |" % (m, mc, mf, mc / mf if mf else float("nan")))
EOF
