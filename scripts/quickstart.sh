#!/usr/bin/env bash
# Quick start: builds Cairn, starts a local cluster (one monitor and three
# OSDs, each its own process, supervised) in the background, and shows how
# to use it. Stop it with `target/release/cairn down`.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v cc >/dev/null || need+=(build-essential)
# cairn mount uses the kernel's FUSE; fuse3 brings fusermount3 for non-root.
command -v fusermount3 >/dev/null || need+=(fuse3)
# The S3 demo signs its requests with curl.
command -v curl >/dev/null || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
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
echo
echo "== the file system: cairn mount $data/mnt (FUSE), then ordinary tools"
mkdir -p "$data/mnt"
"$cairn" mount --allow-other "$data/mnt" >"$data/logs/mount.log" 2>&1 &
mount_pid=$!
for _ in $(seq 50); do grep -q " $data/mnt fuse" /proc/self/mounts && break; sleep 0.1; done
mkdir -p "$data/mnt/demo" && cp "$data/sample.bin" "$data/mnt/demo/" && ls -l "$data/mnt/demo"
cmp "$data/sample.bin" "$data/mnt/demo/sample.bin" && echo "4 MiB file read back byte-exact through the mount"
kill "$mount_pid" && wait "$mount_pid" 2>/dev/null || true
echo
echo "== S3: the gateway cairn up started (endpoint and keys in $data/s3-admin.json)"
field() { sed -n "s/.*\"$1\": *\"\([^\"]*\)\".*/\1/p" "$data/s3-admin.json"; }
endpoint=$(field endpoint) key=$(field access_key) secret=$(field secret_key)
# curl signs S3 requests itself (SigV4); any S3 client works the same way.
s3() { curl -sS -f --aws-sigv4 "aws:amz:us-east-1:s3" --user "$key:$secret" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"; }
s3 -X PUT "$endpoint/demo" && echo "bucket demo made"
s3 -T "$data/sample.bin" "$endpoint/demo/sample.bin" && echo "4 MiB object PUT"
s3 "$endpoint/demo/sample.bin" -o "$data/sample.s3" && cmp "$data/sample.bin" "$data/sample.s3" && echo "and read back byte-exact"
cat <<TXT

The cluster keeps running in the background (logs in $data/logs).
S3 clients (aws, boto3, rclone, s3cmd) take the endpoint and keys:
  export AWS_ACCESS_KEY_ID=$key AWS_SECRET_ACCESS_KEY=$secret AWS_DEFAULT_REGION=us-east-1
  aws --endpoint-url $endpoint s3 ls s3://demo
Try:
  $cairn status
  $cairn pool create mypool --size 3 --pg-num 64
  $cairn object put --pool mypool NAME FILE     (and get, stat, rm; '-' for stdin/stdout)
  $cairn placement simulate --racks 5 --hosts 100 --osds-per-host 10 --pg-num 4096 --size 3
  $cairn mount --allow-other /mnt/cairn &       (the file system; cairn fs ls shows its MDS)
  $cairn bench fs --dir /mnt/cairn --procs 2    (IOR/mdtest-like phases on any mounted directory)
  $cairn bench store --dir /var/tmp --fio
  $cairn down                                   (stops the cluster)
TXT
