#!/usr/bin/env bash
# s3cmd (at its defaults, which sign for region "US" until told better)
# and s3fs (a FUSE mount used with ordinary tools) against a gateway.
# Env: PORT (the gateway's, on 127.0.0.1), K, S (keys), WORK (a scratch
# directory). Prints "s3cmd and s3fs ok" at the end; exits non-zero with
# the failed step otherwise.
set -euo pipefail
endpoint="127.0.0.1:$PORT"
cfg="$WORK/s3cfg"
cat > "$cfg" <<EOF
[default]
access_key = $K
secret_key = $S
host_base = $endpoint
host_bucket = $endpoint
use_https = False
EOF
s3c() { s3cmd -c "$cfg" --no-progress "$@"; }
fail() { echo "FAILED: $*" >&2; exit 1; }

# A tree of small files and one large enough for multipart (s3cmd's
# chunks are 15 MB).
tree="$WORK/tree"
mkdir -p "$tree/a/b"
for i in 1 2 3 4 5; do echo "small file $i" > "$tree/a/f$i.txt"; done
head -c 20000000 /dev/urandom > "$tree/a/b/large.bin"

s3c mb s3://tools
s3c put "$tree/a/f1.txt" s3://tools/one.txt
s3c get --force s3://tools/one.txt "$WORK/one.txt"
cmp "$tree/a/f1.txt" "$WORK/one.txt" || fail "s3cmd get"
s3c sync "$tree/" s3://tools/tree/
listed=$(s3c ls -r s3://tools/tree/ | wc -l)
[ "$listed" = 6 ] || fail "s3cmd ls -r: $listed keys"
again=$(s3c sync "$tree/" s3://tools/tree/ | grep -c upload || true)
[ "$again" = 0 ] || fail "a second sync uploaded $again files"
s3c sync s3://tools/tree/ "$WORK/down/"
diff -r "$tree" "$WORK/down" || fail "s3cmd sync down"
info=$(s3c info s3://tools/tree/a/b/large.bin)
grep -q "File size: 20000000" <<< "$info" || fail "s3cmd info: $info"
s3c cp s3://tools/one.txt s3://tools/copy.txt
s3c mv s3://tools/copy.txt s3://tools/moved.txt
[ "$(s3c ls s3://tools/ | grep -c moved.txt)" = 1 ] || fail "s3cmd mv"
s3c setacl --acl-public s3://tools
[ "$(curl -s "http://$endpoint/tools/one.txt")" = "small file 1" ] || fail "anonymous GET of a public bucket"
s3c setacl --acl-private s3://tools
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$endpoint/tools/one.txt")" = 403 ] || fail "private again"
url=$(s3c signurl s3://tools/one.txt +300)
[ "$(curl -s "$url")" = "small file 1" ] || fail "s3cmd signurl"
total=$(( $(cat $(find "$tree" -type f) | wc -c) + 2 * $(wc -c < "$tree/a/f1.txt") ))
[ "$(s3c du s3://tools | awk '{print $1}')" = "$total" ] || fail "s3cmd du: $(s3c du s3://tools), not $total"
echo "s3cmd ok"

# s3fs: the bucket mounted, used with ordinary tools, seen by s3cmd.
mnt="$WORK/mnt"
mkdir -p "$mnt"
echo "$K:$S" > "$WORK/passwd"
chmod 600 "$WORK/passwd"
s3fs tools "$mnt" -o passwd_file="$WORK/passwd" -o url="http://$endpoint" \
  -o use_path_request_style -o logfile="$WORK/s3fs.log" -o dbglevel=warn
trap 'fusermount -u "$mnt" 2>/dev/null || true' EXIT
for _ in $(seq 50); do mountpoint -q "$mnt" && break; sleep 0.1; done
mountpoint -q "$mnt" || fail "s3fs did not mount"
[ "$(cat "$mnt/one.txt")" = "small file 1" ] || fail "s3fs read"
diff -r "$tree/a" "$mnt/tree/a" || fail "s3fs sees the synced tree"
echo "written through s3fs" > "$mnt/new.txt"
mkdir "$mnt/dir"
cp "$tree/a/b/large.bin" "$mnt/dir/large-copy.bin"
cmp "$tree/a/b/large.bin" "$mnt/dir/large-copy.bin" || fail "s3fs large copy"
mv "$mnt/new.txt" "$mnt/dir/renamed.txt"
echo "appended" >> "$mnt/dir/renamed.txt"
chmod 640 "$mnt/dir/renamed.txt"
[ "$(stat -c %a "$mnt/dir/renamed.txt")" = 640 ] || fail "s3fs chmod"
ln -s ../one.txt "$mnt/dir/link"
[ "$(cat "$mnt/dir/link")" = "small file 1" ] || fail "s3fs symlink"
sync
s3c get --force s3://tools/dir/renamed.txt "$WORK/renamed.txt"
[ "$(cat "$WORK/renamed.txt")" = "$(printf 'written through s3fs\nappended')" ] || fail "s3cmd reads what s3fs wrote"
s3c get --force s3://tools/dir/large-copy.bin "$WORK/large-copy.bin"
cmp "$tree/a/b/large.bin" "$WORK/large-copy.bin" || fail "s3cmd reads s3fs's large file"
[ "$(s3c ls s3://tools/ | grep -c new.txt || true)" = 0 ] || fail "s3fs mv left the source"
rm -r "$mnt/dir" "$mnt/tree"
rm "$mnt/one.txt" "$mnt/moved.txt"
[ -z "$(ls -A "$mnt")" ] || fail "s3fs rm: $(ls -A "$mnt")"
fusermount -u "$mnt"
trap - EXIT
echo "s3fs ok"

left=$(s3c ls -r s3://tools | wc -l)
[ "$left" = 0 ] || fail "left in the bucket: $(s3c ls -r s3://tools)"
s3c rb s3://tools
echo "s3cmd and s3fs ok"
