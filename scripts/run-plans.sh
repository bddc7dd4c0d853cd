#!/usr/bin/env bash
# Runs every shipped plan (plans/*.toml) with `cairn bench sweep`, each
# into OUT/NAME, then `cairn sizing` on the emulated-hardware sweep:
#
#   scripts/run-plans.sh [OUT] [REPEATS] [DURATION] [PLAN...]
#
# REPEATS and DURATION replace the plans' own for a quick look (defaults:
# the plans' own; "-" keeps them). A plan whose report exists is skipped
# (delete OUT/NAME to run it again; an interrupted one resumes). Needs
# root (cgroups, dropping the page cache), fio and fuse3. Uses $CAIRN if
# set, else builds with `cargo build --release` ($CARGO_TARGET_DIR,
# default /var/tmp/cairn-ci-target).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/var/tmp/cairn-plans}
REPEATS=${2:--}
DURATION=${3:--}
shift $(( $# > 3 ? 3 : $# ))
if [ -z "${CAIRN:-}" ]; then
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/cairn-ci-target}"
  cargo build --release --bin cairn >&2
  CAIRN="$CARGO_TARGET_DIR/release/cairn"
fi
plans=("$@")
[ ${#plans[@]} -gt 0 ] || plans=(plans/*.toml)
mkdir -p "$OUT"
for plan in "${plans[@]}"; do
  name=$(basename "$plan" .toml)
  [ -f "$OUT/$name/report.html" ] && { echo "== $name: done already"; continue; }
  flags=()
  [ "$REPEATS" != - ] && flags+=(--repeats "$REPEATS")
  # Failures must still fall within the shorter phases.
  [ "$DURATION" != - ] && flags+=(--duration "$DURATION")
  echo "== $name ($(date -u +%H:%M:%S))"
  "$CAIRN" bench sweep --plan "$plan" --out "$OUT/$name" --data "$OUT/data" "${flags[@]}"
done
rm -rf "$OUT/data"
if [ -f "$OUT/sizing-disk-cpu-memory/summary.json" ]; then
  echo "== cairn sizing"
  "$CAIRN" sizing --from "$OUT/sizing-disk-cpu-memory" \
    --target "write=1GB/s,read=2GB/s,capacity=500TB,redundancy=3x,headroom=0.7" | tee "$OUT/sizing.txt"
fi
