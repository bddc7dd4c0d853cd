#!/usr/bin/env bash
# IO500's phases (`cairn bench io500`) on a Cairn FUSE mount (`cairn up`:
# 3 OSDs, size 3, one MDS) and on a local directory of the same disk, then
# the two side by side (`cairn bench compare`).
# Usage: scripts/io500-cairn-vs-local.sh [STONEWALL] [PROCS] [MAX_BYTES]
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
STONEWALL=${1:-10s}
PROCS=${2:-2}
MAX_BYTES=${3:-4G}
WORK=${WORK:-/var/tmp/cairn-io500}
OUT=${OUT:-$WORK/results}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/cairn-ci-target}
if [ -z "${CAIRN:-}" ]; then
  (cd "$HERE" && cargo build --release --quiet --bin cairn)
  CAIRN=$CARGO_TARGET_DIR/release/cairn
fi
DATA=$WORK/cluster
MNT=$WORK/mnt
LOCAL=$WORK/local
"$CAIRN" down --data "$DATA" > /dev/null 2>&1 || true
rm -rf "$DATA" "$LOCAL"
mkdir -p "$MNT" "$LOCAL" "$OUT"
mount_pid=
cleanup() {
  if mountpoint -q "$MNT"; then fusermount3 -u "$MNT" || umount "$MNT" || true; fi
  if [ -n "$mount_pid" ]; then wait "$mount_pid" 2> /dev/null || true; fi
  "$CAIRN" down --data "$DATA" > /dev/null 2>&1 || true
  rm -rf "$DATA" "$LOCAL"
}
trap cleanup EXIT
"$CAIRN" up --detach --data "$DATA" --osds 3 --base-port 18750 --s3-port 0 > /dev/null
"$CAIRN" mount --conf "$DATA/cairn.toml" "$MNT" 2> "$OUT/mount.log" &
mount_pid=$!
for _ in $(seq 50); do mountpoint -q "$MNT" && break; sleep 0.2; done
mountpoint -q "$MNT"
run=(bench io500 --procs "$PROCS" --stonewall "$STONEWALL" --max-bytes "$MAX_BYTES" --drop-caches --json)
"$CAIRN" "${run[@]}" --dir "$MNT" > "$OUT/cairn.json"
"$CAIRN" "${run[@]}" --dir "$LOCAL" > "$OUT/local.json"
"$CAIRN" bench compare "$OUT/local.json" "$OUT/cairn.json"
