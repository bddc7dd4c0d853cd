#!/usr/bin/env bash
# What versioning costs a PUT: `cairn bench s3` overwriting keys in an
# unversioned bucket and in a versioned one (where every overwrite
# archives the version it replaces), interleaved, medians over REPEATS.
#
#   scripts/s3-versioning-bench.sh [REPEATS] [SECONDS]   (default 3, 10)
#
# 4 KiB PUTs, 64 in flight, cycling over 2,000 keys; 4 MiB PUTs, 16 in
# flight, cycling over 64 keys. 3 OSDs on this machine's disk, size 3.
# Raw results: $OUT (default /var/tmp/cairn-s3-vbench/results).
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
REPEATS=${1:-3}
RT=${2:-10}
WORK=${WORK:-/var/tmp/cairn-s3-vbench}
OUT=${OUT:-$WORK/results}
DATA=$WORK/cairn
PORT=18550
S3_PORT=18580
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/cairn-ci-target}

cd "$HERE"
if [ -z "${CAIRN:-}" ]; then
  cargo build --release --quiet --bin cairn
  CAIRN=$CARGO_TARGET_DIR/release/cairn
fi
rm -rf "$OUT" "$DATA"
mkdir -p "$OUT"
results=$OUT/results.tsv
trap '"$CAIRN" down --data "$DATA" > /dev/null 2>&1 || true; rm -rf "$DATA"' EXIT

"$CAIRN" up --detach --data "$DATA" --osds 3 --base-port "$PORT" --mds 0 \
  --s3-port "$S3_PORT" > "$OUT/cairn-up.log"
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$DATA/s3-admin.json" "$1"; }
ENDPOINT=$(field endpoint)
KEY=$(field access_key)
SECRET=$(field secret_key)
signed() { curl -sSf --aws-sigv4 "aws:amz:us-east-1:s3" --user "$KEY:$SECRET" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"; }
signed -X PUT "$ENDPOINT/plain" > /dev/null
signed -X PUT "$ENDPOINT/versioned" > /dev/null
signed -X PUT -H "Content-Type: application/xml" \
  --data '<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>' \
  "$ENDPOINT/versioned?versioning=" > /dev/null
signed "$ENDPOINT/versioned?versioning=" | grep -q Enabled

value() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
for round in $(seq "$REPEATS"); do
  if [ $((round % 2)) = 1 ]; then order="plain versioned"; else order="versioned plain"; fi
  for bucket in $order; do
    echo "== round $round: $bucket"
    "$CAIRN" bench s3 --endpoint "$ENDPOINT" --access-key "$KEY" --secret-key "$SECRET" \
      --bucket "$bucket" --mode put --prefix small --object-size 4K --objects 2000 \
      --concurrency 64 --duration "${RT}s" --json > "$OUT/$bucket-put4k-$round.json"
    printf '%s\tput-4k-ops-s\t%s\t%s\n' "$bucket" "$round" \
      "$(value "$OUT/$bucket-put4k-$round.json" ops_per_sec)" >> "$results"
    "$CAIRN" bench s3 --endpoint "$ENDPOINT" --access-key "$KEY" --secret-key "$SECRET" \
      --bucket "$bucket" --mode put --prefix large --object-size 4M --objects 64 \
      --concurrency 16 --duration "${RT}s" --json > "$OUT/$bucket-put4m-$round.json"
    printf '%s\tput-4m-mib-s\t%s\t%s\n' "$bucket" "$round" \
      "$(value "$OUT/$bucket-put4m-$round.json" mib_per_sec)" >> "$results"
  done
done

python3 - "$results" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    bucket, workload, _, value = line.split("\t")
    rows[(bucket, workload)].append(float(value))
print(f"{'workload':<16}{'unversioned':>14}{'versioned':>12}{'ratio':>8}")
for workload in ["put-4k-ops-s", "put-4m-mib-s"]:
    plain = statistics.median(rows[("plain", workload)])
    versioned = statistics.median(rows[("versioned", workload)])
    print(f"{workload:<16}{plain:14.1f}{versioned:12.1f}{versioned / plain:8.2f}")
for (bucket, workload), values in sorted(rows.items()):
    print(f"  {bucket} {workload}: {', '.join(f'{v:.1f}' for v in values)}")
PY
