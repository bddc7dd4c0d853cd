#!/usr/bin/env bash
# S3 through Cairn's gateway next to Ceph's RGW, and next to Cairn's own
# object path on the same pool (issue 23's recorded measurement):
# `cairn bench s3` against both gateways and `cairn bench object` on the
# gateway's pool, interleaved in one sitting, medians over REPEATS rounds.
#
#   scripts/s3-vs-rgw.sh [REPEATS] [SECONDS] [LIST_KEYS]   (default 3, 10, 100000)
#
# Workloads: 4 MiB PUT and GET (page cache dropped first), 16 requests in
# flight; 4 KiB PUT, 64 in flight (SMALL_CONCURRENCY); LIST of a bucket of LIST_KEYS keys in pages
# of 1,000 (one walker); then the gateway's peak resident memory (VmHWM)
# under 64 concurrent PUTs of 256 MiB objects (to a size-1 pool through a
# second gateway, so the 16 GiB fit on the disk).
#
# Both systems: 3 OSDs on this machine's disk, replicated size 3, default
# durability and checksums. Ceph from ../shared/anchors/ceph (deployed if
# it is not running, torn down at the end only then). Needs root. Raw
# results: $OUT (default /var/tmp/cairn-s3-bench/results).
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
REPEATS=${1:-3}
RT=${2:-10}
LIST_KEYS=${3:-100000}
ANCHOR=${ANCHOR:-$HERE/../shared/anchors/ceph}
WORK=${WORK:-/var/tmp/cairn-s3-bench}
OUT=${OUT:-$WORK/results}
DATA=$WORK/cairn
PORT=18450
S3_PORT=18480
MEM_PORT=18481
MEM_SIZE=${MEM_SIZE:-256M}
SMALL_CONCURRENCY=${SMALL_CONCURRENCY:-64}
export CEPH_CONF=/var/tmp/ceph-anchor/ceph.conf
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/cairn-ci-target}

cd "$HERE"
if [ -z "${CAIRN:-}" ]; then
  cargo build --release --quiet --bin cairn
  CAIRN=$CARGO_TARGET_DIR/release/cairn
fi
rm -rf "$OUT" "$DATA"
mkdir -p "$OUT"
results=$OUT/results.tsv

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

deployed=0
if ! timeout 10 ceph -s > /dev/null 2>&1; then
  "$ANCHOR/deploy.sh" > "$OUT/ceph-deploy.log" 2>&1
  deployed=1
fi
mem_pid=
cleanup() {
  if [ -n "$mem_pid" ]; then kill "$mem_pid" 2> /dev/null || true; fi
  "$CAIRN" down --data "$DATA" > /dev/null 2>&1 || true
  if [ "$deployed" = 1 ]; then "$ANCHOR/teardown.sh" > /dev/null 2>&1 || true; fi
}
trap cleanup EXIT
# shellcheck disable=SC1091
source /var/tmp/ceph-anchor/rgw.env
RGW=("$S3_ENDPOINT" "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY")

"$CAIRN" up --detach --data "$DATA" --osds 3 --base-port "$PORT" --mds 0 \
  --s3-port "$S3_PORT" > "$OUT/cairn-up.log"
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$DATA/s3-admin.json" "$1"; }
CAIRN_S3=("$(field endpoint)" "$(field access_key)" "$(field secret_key)")
CONF=$DATA/cairn.toml

value() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

# s3 SYSTEM NAME MODE [FLAGS...]: one `cairn bench s3` run, its JSON kept.
s3() {
  local system=$1 name=$2 mode=$3
  shift 3
  local -a target
  if [ "$system" = cairn ]; then target=("${CAIRN_S3[@]}"); else target=("${RGW[@]}"); fi
  "$CAIRN" bench s3 --endpoint "${target[0]}" --access-key "${target[1]}" \
    --secret-key "${target[2]}" --bucket s3bench --mode "$mode" --json "$@" \
    > "$OUT/$system-$name.json"
}

# record SYSTEM WORKLOAD ROUND FILE FIELD
record() {
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(value "$4" "$5")" >> "$results"
}

echo "== populating the LIST buckets with $LIST_KEYS keys each"
# POPULATE_RGW=0 reuses RGW's LIST bucket of an earlier run (the anchor
# keeps running when it was up before the script started).
populate=(cairn)
[ "${POPULATE_RGW:-1}" = 1 ] && populate+=(rgw)
for system in "${populate[@]}"; do
  s3 "$system" populate put --prefix list --object-size 1 --count "$LIST_KEYS" \
    --concurrency 64 --duration 60m
  echo "$system: $(value "$OUT/$system-populate.json" ops_per_sec) PUT/s of 1-byte objects"
done

for round in $(seq "$REPEATS"); do
  if [ $((round % 2)) = 1 ]; then order="cairn rgw"; else order="rgw cairn"; fi
  for system in $order; do
    echo "== round $round: $system"
    s3 "$system" put4m-$round put --prefix p4m --object-size 4M --duration "${RT}s"
    record "$system" put-4m-mib-s "$round" "$OUT/$system-put4m-$round.json" mib_per_sec
    drop
    s3 "$system" get4m-$round get --prefix p4m --duration "${RT}s"
    record "$system" get-4m-mib-s "$round" "$OUT/$system-get4m-$round.json" mib_per_sec
    s3 "$system" del4m-$round delete --prefix p4m --concurrency 32
    s3 "$system" put4k-$round put --prefix p4k --object-size 4K --duration "${RT}s" \
      --concurrency "$SMALL_CONCURRENCY"
    record "$system" put-4k-ops-s "$round" "$OUT/$system-put4k-$round.json" ops_per_sec
    s3 "$system" del4k-$round delete --prefix p4k --concurrency 32
    drop
    s3 "$system" list-$round list --prefix list --concurrency 1 --duration "${RT}s"
    record "$system" list-keys-s "$round" "$OUT/$system-list-$round.json" keys_per_sec
  done
  echo "== round $round: cairn native (bench object, pool data)"
  "$CAIRN" bench object --conf "$CONF" --pool data --mode write --object-size 4M \
    --concurrency 16 --duration "${RT}s" --json > "$OUT/native-write-$round.json"
  record native put-4m-mib-s "$round" "$OUT/native-write-$round.json" bandwidth_mib_per_sec
  drop
  "$CAIRN" bench object --conf "$CONF" --pool data --mode rand --concurrency 16 \
    --duration "${RT}s" --cleanup --json > "$OUT/native-rand-$round.json"
  record native get-4m-mib-s "$round" "$OUT/native-rand-$round.json" bandwidth_mib_per_sec
done

echo "== gateway memory: 64 concurrent PUTs of $MEM_SIZE"
"$CAIRN" pool create s3mem --size 1 --pg-num 32 --conf "$CONF" > /dev/null
"$CAIRN" s3 serve --addr "127.0.0.1:$MEM_PORT" --default-pool s3mem --conf "$CONF" \
  2> "$OUT/mem-gateway.log" &
mem_pid=$!
for _ in $(seq 100); do
  (echo > "/dev/tcp/127.0.0.1/$MEM_PORT") 2> /dev/null && break
  sleep 0.1
done
"$CAIRN" bench s3 --endpoint "http://127.0.0.1:$MEM_PORT" --access-key "${CAIRN_S3[1]}" \
  --secret-key "${CAIRN_S3[2]}" --bucket s3mem --mode put --prefix mem --object-size "$MEM_SIZE" \
  --concurrency 64 --count 64 --duration 30m --cleanup --json > "$OUT/mem-put.json"
hwm_kib=$(awk '/VmHWM/ {print $2}' "/proc/$mem_pid/status")
printf 'cairn\tgateway-peak-rss-mib\t1\t%s\n' "$((hwm_kib / 1024))" >> "$results"
echo "peak RSS $((hwm_kib / 1024)) MiB; $(value "$OUT/mem-put.json" mib_per_sec) MiB/s, $(value "$OUT/mem-put.json" errors) errors"
kill "$mem_pid"
wait "$mem_pid" 2> /dev/null || true
mem_pid=

python3 - "$results" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    system, workload, _, value = line.split("\t")
    rows[(system, workload)].append(float(value))
med = {k: statistics.median(v) for k, v in rows.items()}
spread = {k: (min(v), max(v)) for k, v in rows.items()}
print(f"{'workload':<22}{'RGW':>12}{'Cairn S3':>12}{'native':>12}{'÷ RGW':>8}{'÷ native':>10}")
for workload in ["put-4m-mib-s", "get-4m-mib-s", "put-4k-ops-s", "list-keys-s"]:
    rgw = med.get(("rgw", workload))
    cairn = med.get(("cairn", workload))
    native = med.get(("native", workload))
    cell = lambda x: f"{x:12.1f}" if x is not None else f"{'-':>12}"
    ratio = lambda a, b: f"{a / b:.2f}" if a and b else "-"
    print(f"{workload:<22}{cell(rgw)}{cell(cairn)}{cell(native)}{ratio(cairn, rgw):>8}{ratio(cairn, native):>10}")
for (system, workload), (lo, hi) in sorted(spread.items()):
    print(f"  {system} {workload}: min {lo:.1f} max {hi:.1f} over {len(rows[(system, workload)])}")
PY
