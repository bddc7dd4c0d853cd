#!/usr/bin/env bash
# Inline data on (cluster a) against off (cluster b, `cairn up --mds-inline-max 0`),
# rounds interleaved, mdtest-hard with 1 and 8 processes, medians of 3:
#   cairn up --data /var/tmp/inl-a --base-port 19800 --mds 1 --detach
#   cairn up --data /var/tmp/inl-b --base-port 19900 --mds 1 --mds-inline-max 0 --detach
#   cairn mount --conf /var/tmp/inl-a/cairn.toml /mnt/inl-a &  (and b at /mnt/inl-b)
set -euo pipefail
C=${CAIRN:-$(dirname "$0")/../target/release/cairn}
OUT=/var/tmp/inline-bench; mkdir -p $OUT; : > $OUT/results.jsonl
for r in 1 2 3; do
  for sys in a b; do
    for p in 1 8; do
      n=$((10000 / p))
      mkdir -p /mnt/inl-$sys/r$r-p$p
      $C bench fs --dir /mnt/inl-$sys/r$r-p$p --procs $p --files-per-proc $n --phases mdtest-hard --drop-caches --json > $OUT/$sys-r$r-p$p.json
      python3 -c "
import json,sys
d=json.load(open('$OUT/$sys-r$r-p$p.json'))
for ph in d['phases']:
  if ph.get('ops_per_sec'): print(json.dumps({'sys':'$sys','round':$r,'metric':'%s p$p'%ph['phase'],'value':ph['ops_per_sec']}))
" >> $OUT/results.jsonl
    done
  done
done
python3 - <<'PY'
import json,statistics,collections
rows=[json.loads(l) for l in open('/var/tmp/inline-bench/results.jsonl')]
m=collections.defaultdict(list)
for r in rows: m[(r['metric'],r['sys'])].append(r['value'])
for metric in sorted({k[0] for k in m}):
  a=statistics.median(m[(metric,'a')]); b=statistics.median(m[(metric,'b')])
  print(f"{metric:28s} inline {a:10.0f}  objects {b:10.0f}  ratio {a/b:5.2f}  rounds a={[round(x) for x in m[(metric,'a')]]} b={[round(x) for x in m[(metric,'b')]]}")
PY
