#!/usr/bin/env bash
# The whole test suite: formatting, lints, then every unit, property and
# end-to-end test of the workspace (release mode: property tests map
# thousands of PGs, and end-to-end tests run the real binary).
# Installs what it needs; safe to run on a fresh Debian/Ubuntu with Rust.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cc >/dev/null || need_apt+=(build-essential)
# tests/partition.rs makes network namespaces and veth pairs.
command -v ip >/dev/null || need_apt+=(iproute2)
# tests/fs.rs mounts with the kernel's FUSE and runs tests/fs/*.py.
command -v fusermount3 >/dev/null || need_apt+=(fuse3)
command -v python3 >/dev/null || need_apt+=(python3)
# tests/s3.rs syncs and checks a tree with rclone.
command -v rclone >/dev/null || need_apt+=(rclone)
# ... and with s3cmd and an s3fs mount (Debian's).
command -v s3cmd >/dev/null || need_apt+=(s3cmd)
command -v s3fs >/dev/null || need_apt+=(s3fs)
command -v curl >/dev/null || need_apt+=(curl)
# tests/bench_sweep.rs checks that a sweep's HTML report renders, and
# measures its emulated disk limits with fio.
command -v chromium >/dev/null || need_apt+=(chromium)
command -v fio >/dev/null || need_apt+=(fio)
# ... and starts several clients of a point through Open MPI's mpirun.
command -v mpirun >/dev/null || need_apt+=(openmpi-bin)
# ... and runs a point on Ceph (../shared/anchors/ceph deploys it).
command -v ceph-osd >/dev/null || need_apt+=(ceph ceph-mds ceph-fuse radosgw)
command -v bc >/dev/null || need_apt+=(bc)
command -v uuidgen >/dev/null || need_apt+=(uuid-runtime)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# tests/s3.rs drives the gateway with the newest boto3 at its defaults (the
# AWS SDKs' checksum trailers change between releases): a virtual
# environment outside the clone, upgraded on every run.
S3_CLIENTS=${CAIRN_S3_CLIENTS:-/var/tmp/cairn-s3-clients}
if [ ! -x "$S3_CLIENTS/bin/python" ]; then
  if ! python3 -m venv "$S3_CLIENTS" 2>/dev/null; then
    if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
    python3 -m venv "$S3_CLIENTS"
  fi
fi
"$S3_CLIENTS/bin/python" -m pip install --quiet --upgrade boto3
export CAIRN_S3_PYTHON="$S3_CLIENTS/bin/python"
# The AWS CLI pins its own botocore: a second environment.
AWS_CLI=${CAIRN_AWS_CLI_ENV:-/var/tmp/cairn-aws-cli}
[ -x "$AWS_CLI/bin/python" ] || python3 -m venv "$AWS_CLI"
"$AWS_CLI/bin/python" -m pip install --quiet --upgrade awscli
export CAIRN_AWS_CLI="$AWS_CLI/bin/aws"

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --release --workspace --all-targets -- -D warnings
echo "== cargo test"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# --all-targets: unit, property and end-to-end tests (there are no doc tests).
set +e
cargo test --release --workspace --all-targets --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
passed=$(grep -Eo '[0-9]+ passed' "$log" | awk '{s += $1} END {print s + 0}')
failed=$(grep -Eo '[0-9]+ failed' "$log" | awk '{s += $1} END {print s + 0}')
echo
echo "cairn: ${passed} passed, ${failed} failed"
exit "$status"
