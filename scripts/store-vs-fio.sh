#!/usr/bin/env bash
# The local store next to fio on the same directory, interleaved, repeated
# (default 3 times) so the shared machine's noise shows, medians reported.
# Usage: scripts/store-vs-fio.sh [DIR] [REPEATS]   (DIR must be on a real disk)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/var/tmp/cairn-store-bench}
repeats=${2:-3}
cairn=${CAIRN:-target/release/cairn}
size=${SIZE:-1G}
duration=${DURATION:-10}
mkdir -p "$dir"
command -v fio >/dev/null || { echo "installing fio"; apt-get install -y -qq fio >/dev/null; }
out=$(mktemp -d)
trap 'rm -rf "$out" "$dir"/fio.*' EXIT
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
fio_job() { # name rw bs extra...
  local name=$1 rw=$2 bs=$3; shift 3
  fio --name="$name" --filename="$dir/fio.$name" --rw="$rw" --bs="$bs" --direct=1 --ioengine=psync \
      --output-format=json "$@" | python3 -c '
import json,sys; j=json.load(sys.stdin)["jobs"][0]
w=j["write"]; r=j["read"]; x=w if w["io_bytes"] else r
print(x["bw_bytes"]/1048576, x["iops"])'
}
for i in $(seq "$repeats"); do
  echo "run $i/$repeats" >&2
  fio_job seqw write 4M --size="$size" > "$out/fio-w4m-$i"
  drop
  fio_job seqw read 4M --size="$size" > "$out/fio-r4m-$i"
  fio_job rw4k randwrite 4k --size=256M --fsync=1 --runtime="$duration" --time_based > "$out/fio-w4k-$i"
  rm -f "$dir"/fio.*
  "$cairn" bench store --dir "$dir" --size "$size" --duration "${duration}s" --writers 1,16 --json > "$out/cairn-$i.json"
done
python3 - "$out" "$repeats" <<'PY'
import json, statistics, sys, os
out, n = sys.argv[1], int(sys.argv[2])
def fio(kind, field): return [float(open(f"{out}/fio-{kind}-{i}").read().split()[field]) for i in range(1, n+1)]
runs = [json.load(open(f"{out}/cairn-{i}.json"))["store"] for i in range(1, n+1)]
def cairn(phase, key): return [next(p for p in r["phases"] if p["name"] == phase)[key] for r in runs]
med = statistics.median
rows = [
  ("4 MiB durable writes, MiB/s", fio("w4m", 0), cairn("write 4 MiB", "mib_per_sec")),
  ("4 MiB reads (cache dropped), MiB/s", fio("r4m", 0), cairn("read 4 MiB", "mib_per_sec")),
  ("4 KiB durable writes, 1 writer, IOPS", fio("w4k", 1), cairn("write 4 KiB, 1 writer", "ops_per_sec")),
  ("4 KiB durable writes, 16 writers, IOPS", fio("w4k", 1), cairn("write 4 KiB, 16 writers", "ops_per_sec")),
]
print("| workload | fio (runs) | Cairn (runs) | Cairn ÷ fio (medians) |")
print("|---|---|---|---:|")
for name, f, c in rows:
  fmt = lambda xs: ", ".join(f"{x:,.0f}" for x in xs)
  print(f"| {name} | {fmt(f)} | {fmt(c)} | {med(c)/med(f):.2f} |")
one, many = med(cairn("write 4 KiB, 1 writer", "ops_per_sec")), med(cairn("write 4 KiB, 16 writers", "ops_per_sec"))
print(f"\n16 writers ÷ 1 writer (group commit): {many/one:.1f}x")
for phase in ["write 4 MiB", "write 4 KiB, 1 writer", "write 4 KiB, 16 writers"]:
  amp = cairn(phase, "write_amplification")
  dev = [p["device_write_bytes"] / p["bytes"] for r in runs for p in r["phases"] if p["name"] == phase and p["device_write_bytes"]]
  print(f"write amplification, {phase}: process {med(amp):.3f}" + (f", device {med(dev):.3f}" if dev else ""))
rss = [r["peak_rss_bytes"] / 1048576 for r in runs]
print(f"peak RSS: {max(rss):.0f} MiB (metadata cache {runs[0]['cache_bytes']/1048576:.0f} MiB)")
PY
