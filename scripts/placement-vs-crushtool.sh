#!/usr/bin/env bash
# Cairn's placement next to Ceph's crushtool on the same cluster shape, in
# one sitting: distribution and movement (4,096 and 100,000 PGs), then
# mapping speed for 100,000 PGs x 3 over 1,000 OSDs (3 runs each, medians).
# Needs crushtool (apt-get install ceph-base) and a release build of cairn.
set -euo pipefail
cd "$(dirname "$0")/.."
cairn=${CAIRN:-target/release/cairn}
shape=(--racks 5 --hosts 100 --osds-per-host 10 --size 3)
out=${OUT:-/var/tmp/cairn-bench/placement}
mkdir -p "$out"
for pgs in 4096 100000; do
  echo "## ${pgs} PGs, size 3, failure domain host"
  "$cairn" placement simulate "${shape[@]}" --pg-num "$pgs" --json > "$out/cairn-$pgs.json"
  python3 scripts/crushtool-compare.py "${shape[@]}" --pg-num "$pgs" --throughput-pgs 100000 \
    --cairn-json "$out/cairn-$pgs.json" --json > "$out/crushtool-$pgs.json" 2> "$out/table-$pgs.md"
  sed -n '/^| metric/,$p' "$out/table-$pgs.md"
  echo
done
echo "## Mapping speed: 100,000 PGs x 3 replicas over 1,000 OSDs, one core (PG mappings/s)"
for run in 1 2 3; do
  c=$("$cairn" placement simulate "${shape[@]}" --pg-num 100000 --no-movement --json \
      | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["pools"][0]["throughput"]["mappings_per_sec"]))')
  k=$(python3 scripts/crushtool-compare.py "${shape[@]}" --pg-num 64 --throughput-pgs 100000 --json \
      | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["throughput"]["mappings_per_sec"]))')
  echo "run $run: cairn $c crushtool $k"
done
echo
echo "## Balancer (4,096 PGs)"
"$cairn" placement balance "${shape[@]}" --pg-num 4096
