#!/usr/bin/env bash
# Quick start: builds Cairn, starts a local cluster (one monitor and three
# OSDs, each its own process, supervised) in the background, and shows how
# to use it. Stop it with `target/release/cairn down`.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cc >/dev/null; then
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq build-essential
fi
cargo build --release
cairn=target/release/cairn
data=/var/tmp/cairn
# The demo starts fresh each time (`cairn up` on an existing data dir would
# bring the old cluster back with its data instead).
if [ -e "$data" ]; then
  echo "== stopping and removing the previous demo cluster in $data"
  "$cairn" down --data "$data" >/dev/null 2>&1 || true
  rm -rf "$data"
fi
echo "== cairn up --detach --data $data"
"$cairn" up --detach --data "$data"
echo
echo "== cairn status"
"$cairn" status
echo
echo "== store and fetch an object"
echo "hello from Cairn" | "$cairn" object put --pool data greeting -
"$cairn" object get --pool data greeting -
"$cairn" object stat --pool data greeting
head -c 4194304 /dev/urandom > "$data/sample.bin"
"$cairn" object put --pool data sample "$data/sample.bin"
"$cairn" object get --pool data sample "$data/sample.out"
cmp "$data/sample.bin" "$data/sample.out" && echo "4 MiB object read back byte-exact"
cat <<TXT

The cluster keeps running in the background (logs in $data/logs).
Try:
  $cairn status
  $cairn pool create mypool --size 3 --pg-num 64
  $cairn object put --pool mypool NAME FILE     (and get, stat, rm; '-' for stdin/stdout)
  $cairn placement simulate --racks 5 --hosts 100 --osds-per-host 10 --pg-num 4096 --size 3
  $cairn bench store --dir /var/tmp --fio
  $cairn down                                   (stops the cluster)
TXT
