"""Cairn's S3 gateway through boto3 at its default settings (which send a
CRC32 checksum in an aws-chunked trailer on every PUT).

Env: S3_ENDPOINT, S3_KEY, S3_SECRET (user alice), S3_KEY2, S3_SECRET2
(user bob). Exits non-zero with the failed check on any mismatch.
"""
import base64
import datetime
import concurrent.futures
import hashlib
import os
import sys
import time
import urllib.error
import urllib.request
import zlib

import boto3
import botocore
from botocore.config import Config
from botocore.exceptions import ClientError

ENDPOINT = os.environ["S3_ENDPOINT"]


def client(key, secret, **config):
    return boto3.client(
        "s3",
        endpoint_url=ENDPOINT,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, **config),
    )


s3 = client(os.environ["S3_KEY"], os.environ["S3_SECRET"])
bob = client(os.environ["S3_KEY2"], os.environ["S3_SECRET2"])


def error_code(call, *args, **kwargs):
    try:
        call(*args, **kwargs)
    except ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]
    raise AssertionError(f"{call.__name__} succeeded, an error was expected")


def check(cond, what):
    if not cond:
        raise AssertionError(what)


print("boto3", boto3.__version__, "botocore", botocore.__version__)

# Buckets.
s3.create_bucket(Bucket="photos")
s3.head_bucket(Bucket="photos")
names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
check(names == ["photos"], f"list_buckets: {names}")
check(error_code(s3.create_bucket, Bucket="photos") == ("BucketAlreadyOwnedByYou", 409), "own bucket again")
check(error_code(bob.create_bucket, Bucket="photos") == ("BucketAlreadyExists", 409), "another's bucket")
check(error_code(s3.create_bucket, Bucket="ab")[0] == "InvalidBucketName", "short name")
check(error_code(s3.create_bucket, Bucket="Bad-Name")[0] == "InvalidBucketName", "capitals")
check(error_code(s3.head_bucket, Bucket="nothere")[1] == 404, "head of a missing bucket")
check(bob.list_buckets()["Buckets"] == [], "bob sees no bucket")
check(error_code(bob.get_object, Bucket="photos", Key="x")[0] == "AccessDenied", "bob reads alice's bucket")

# Objects: body, ETag, metadata, standard headers.
body = os.urandom(100_000)
put = s3.put_object(
    Bucket="photos", Key="dir/a.bin", Body=body, ContentType="application/x-test",
    Metadata={"colour": "blue"}, CacheControl="max-age=60",
)
md5 = hashlib.md5(body).hexdigest()
check(put["ETag"] == f'"{md5}"', f"etag {put['ETag']} != {md5}")
got = s3.get_object(Bucket="photos", Key="dir/a.bin")
check(got["Body"].read() == body, "body read back")
check(got["ContentType"] == "application/x-test", f"content type {got['ContentType']}")
check(got["Metadata"] == {"colour": "blue"}, f"metadata {got['Metadata']}")
check(got["CacheControl"] == "max-age=60", "cache control")
check(got["ContentLength"] == len(body), "length")
head = s3.head_object(Bucket="photos", Key="dir/a.bin", ChecksumMode="ENABLED")
check(head["ContentLength"] == len(body) and head["ETag"] == put["ETag"], "head")
crc = base64.b64encode(zlib.crc32(body).to_bytes(4, "big")).decode()
check(head.get("ChecksumCRC32") == crc, f"default CRC32 trailer kept: {head.get('ChecksumCRC32')} != {crc}")

# Ranges.
part = s3.get_object(Bucket="photos", Key="dir/a.bin", Range="bytes=10-19")
check(part["Body"].read() == body[10:20], "range 10-19")
check(part["ContentRange"] == f"bytes 10-19/{len(body)}", f"content range {part['ContentRange']}")
tail = s3.get_object(Bucket="photos", Key="dir/a.bin", Range="bytes=-5")
check(tail["Body"].read() == body[-5:], "suffix range")
check(error_code(s3.get_object, Bucket="photos", Key="dir/a.bin", Range="bytes=200000-")[0] == "InvalidRange", "range past the end")
check(error_code(s3.get_object, Bucket="photos", Key="nope")[0] == "NoSuchKey", "missing key")

# Checksums: SHA256 asked for, and bodies that do not match.
sha = s3.put_object(Bucket="photos", Key="sha", Body=b"hello", ChecksumAlgorithm="SHA256")
want = base64.b64encode(hashlib.sha256(b"hello").digest()).decode()
check(sha.get("ChecksumSHA256") == want, "sha256 on put")
h = s3.head_object(Bucket="photos", Key="sha", ChecksumMode="ENABLED")
check(h.get("ChecksumSHA256") == want, "sha256 on head")
bad_md5 = base64.b64encode(hashlib.md5(b"other").digest()).decode()
check(error_code(s3.put_object, Bucket="photos", Key="bad", Body=b"hello", ContentMD5=bad_md5)[0] == "BadDigest", "Content-MD5 mismatch")
check(error_code(s3.put_object, Bucket="photos", Key="bad", Body=b"hello", ChecksumSHA256=base64.b64encode(b"x" * 32).decode())[0] == "BadDigest", "sha256 mismatch")
check(error_code(s3.head_object, Bucket="photos", Key="bad")[1] == 404, "a refused body stores nothing")

# Conditional writes and reads.
check(error_code(s3.put_object, Bucket="photos", Key="dir/a.bin", Body=b"x", IfNoneMatch="*")[0] == "PreconditionFailed", "create-only over an object")
check(error_code(s3.get_object, Bucket="photos", Key="dir/a.bin", IfNoneMatch=put["ETag"])[1] == 304, "if-none-match on a read")
check(error_code(s3.get_object, Bucket="photos", Key="dir/a.bin", IfMatch='"0000"')[0] == "PreconditionFailed", "if-match on a read")
over = s3.put_object(Bucket="photos", Key="dir/a.bin", Body=b"v2", IfMatch=put["ETag"])
check(error_code(s3.put_object, Bucket="photos", Key="dir/a.bin", Body=b"v3", IfMatch=put["ETag"])[0] == "PreconditionFailed", "if-match of an old etag")
check(s3.get_object(Bucket="photos", Key="dir/a.bin")["Body"].read() == b"v2", "v2 stands")


def create_only(i):
    try:
        s3.put_object(Bucket="photos", Key="race", Body=f"writer {i}".encode(), IfNoneMatch="*")
        return i
    except ClientError as e:
        code = e.response["Error"]["Code"]
        if code != "PreconditionFailed":
            raise
        return None


with concurrent.futures.ThreadPoolExecutor(16) as pool:
    winners = [w for w in pool.map(create_only, range(32)) if w is not None]
check(len(winners) == 1, f"exactly one create-only PUT wins: {winners}")
check(s3.get_object(Bucket="photos", Key="race")["Body"].read() == f"writer {winners[0]}".encode(), "the winner's bytes")

# Reads racing overwrites of a 4 MiB object, which a GET streams 1 MiB at
# a time: every whole read is one version's bytes, never a mix of two (a
# read of a replaced version is cut short, and the reader reads again).
STREAMED = 4 * 1024 * 1024
s3.put_object(Bucket="photos", Key="streamed", Body=bytes([0]) * STREAMED)
writing = True


def overwrite(n):
    for i in range(n * 12 + 1, n * 12 + 13):
        s3.put_object(Bucket="photos", Key="streamed", Body=bytes([i]) * STREAMED)


def read_streamed(_):
    whole = cut = 0
    while writing or whole == 0:
        try:
            body = s3.get_object(Bucket="photos", Key="streamed")["Body"].read()
        except (botocore.exceptions.ResponseStreamingError, botocore.exceptions.IncompleteReadError):
            cut += 1
            continue
        check(len(body) == STREAMED and body.count(body[:1]) == STREAMED, f"a read mixed versions: {sorted(set(body))}")
        whole += 1
    return whole, cut


with concurrent.futures.ThreadPoolExecutor(6) as pool:
    readers = [pool.submit(read_streamed, r) for r in range(4)]
    list(pool.map(overwrite, range(2)))
    writing = False
    reads = [r.result() for r in readers]
print("streamed reads (whole, cut short) per reader:", reads)
s3.delete_object(Bucket="photos", Key="streamed")

# Listing: prefixes, delimiters, paging, V1 markers, url encoding.
for key in ["a/1", "a/2", "b/1", "c", "d e+f", "a/sub/x"]:
    s3.put_object(Bucket="photos", Key=key, Body=key.encode())
every = sorted(["a/1", "a/2", "b/1", "c", "d e+f", "a/sub/x", "dir/a.bin", "race", "sha"])
listed = s3.list_objects_v2(Bucket="photos")
check([o["Key"] for o in listed["Contents"]] == every, f"list: {[o['Key'] for o in listed['Contents']]}")
check(listed["KeyCount"] == len(every) and not listed["IsTruncated"], "key count")
roll = s3.list_objects_v2(Bucket="photos", Delimiter="/")
check([p["Prefix"] for p in roll["CommonPrefixes"]] == ["a/", "b/", "dir/"], f"prefixes {roll.get('CommonPrefixes')}")
check([o["Key"] for o in roll["Contents"]] == ["c", "d e+f", "race", "sha"], "top-level keys")
sub = s3.list_objects_v2(Bucket="photos", Prefix="a/", Delimiter="/")
check([o["Key"] for o in sub["Contents"]] == ["a/1", "a/2"], "under a/")
check([p["Prefix"] for p in sub["CommonPrefixes"]] == ["a/sub/"], "a/sub/")
seen, token = [], None
while True:
    kw = {"Bucket": "photos", "MaxKeys": 2, "Delimiter": "/"}
    if token:
        kw["ContinuationToken"] = token
    page = s3.list_objects_v2(**kw)
    seen += [o["Key"] for o in page.get("Contents", [])] + [p["Prefix"] for p in page.get("CommonPrefixes", [])]
    if not page["IsTruncated"]:
        break
    token = page["NextContinuationToken"]
check(sorted(seen) == sorted(["a/", "b/", "dir/", "c", "d e+f", "race", "sha"]), f"paged: {seen}")
after = s3.list_objects_v2(Bucket="photos", StartAfter="c")
check([o["Key"] for o in after["Contents"]] == every[every.index("c") + 1:], "start-after")
v1 = s3.list_objects(Bucket="photos", Marker="b/1", MaxKeys=2)
check([o["Key"] for o in v1["Contents"]] == ["c", "d e+f"] and v1["IsTruncated"], "v1 marker")
paginator = s3.get_paginator("list_objects_v2")
keys = [o["Key"] for page in paginator.paginate(Bucket="photos", PaginationConfig={"PageSize": 3}) for o in page.get("Contents", [])]
check(keys == every, f"paginator: {keys}")

# Presigned URLs, wrong secrets, unknown keys.
url = s3.generate_presigned_url("get_object", Params={"Bucket": "photos", "Key": "c"}, ExpiresIn=60)
check(urllib.request.urlopen(url).read() == b"c", "presigned GET")
short = s3.generate_presigned_url("get_object", Params={"Bucket": "photos", "Key": "c"}, ExpiresIn=1)
time.sleep(2)
try:
    urllib.request.urlopen(short)
    raise AssertionError("an expired presigned URL worked")
except urllib.error.HTTPError as e:
    check(e.code == 403, f"expired presigned URL: {e.code}")
wrong = client(os.environ["S3_KEY"], "not-the-secret")
check(error_code(wrong.list_buckets) == ("SignatureDoesNotMatch", 403), "wrong secret")
unknown = client("AKIANOBODY", "whatever")
check(error_code(unknown.list_buckets)[0] == "InvalidAccessKeyId", "unknown key")
try:
    urllib.request.urlopen(f"{ENDPOINT}/photos/c")
    raise AssertionError("an anonymous GET worked")
except urllib.error.HTTPError as e:
    check(e.code == 403, f"anonymous: {e.code}")

# A clock 20 minutes off: RequestTimeTooSkewed (SigV4 allows 15).
import botocore.auth
real_now = botocore.auth.get_current_datetime
botocore.auth.get_current_datetime = lambda: real_now() - datetime.timedelta(minutes=20)
try:
    check(error_code(s3.list_buckets) == ("RequestTimeTooSkewed", 403), "a skewed clock")
finally:
    botocore.auth.get_current_datetime = real_now

# Malformed XML bodies: MalformedXML, and nothing changes.
def replace_body(body):
    def hook(request, **kwargs):
        request.data = body
        request.headers["Content-Length"] = str(len(body))
        for name in list(request.headers.keys()):
            if name.lower().startswith("x-amz-checksum") or name.lower() in ("x-amz-sdk-checksum-algorithm", "content-md5"):
                del request.headers[name]
        request.headers["Content-MD5"] = base64.b64encode(hashlib.md5(body).digest()).decode()
    return hook


for body, call, kwargs in [
    (b"<Delete><Object><Key>c</Key>", "delete_objects", {"Delete": {"Objects": [{"Key": "c"}]}}),
    (b"not xml at all", "delete_objects", {"Delete": {"Objects": [{"Key": "c"}]}}),
    (b"<Tagging><TagSet><Tag><Key>k</Key></Tag>", "put_object_tagging", {"Key": "c", "Tagging": {"TagSet": []}}),
]:
    mangler = client(os.environ["S3_KEY"], os.environ["S3_SECRET"])
    mangler.meta.events.register("before-sign.s3.*", replace_body(body))
    code = error_code(getattr(mangler, call), Bucket="photos", **kwargs)
    check(code == ("MalformedXML", 400), f"malformed XML {body!r} in {call}: {code}")
check(s3.get_object(Bucket="photos", Key="c")["Body"].read() == b"c", "nothing deleted by a malformed request")
check(s3.get_object_tagging(Bucket="photos", Key="c")["TagSet"] == [], "no tags set by a malformed request")

# A public-read bucket: anyone reads and lists it (unsigned, or another
# user), no one else writes; private again, and it is closed.
s3.create_bucket(Bucket="open-data", ACL="public-read")
s3.put_object(Bucket="open-data", Key="readme.txt", Body=b"for everyone")
check(urllib.request.urlopen(f"{ENDPOINT}/open-data/readme.txt").read() == b"for everyone", "anonymous GET")
listing = urllib.request.urlopen(f"{ENDPOINT}/open-data?list-type=2").read()
check(b"<Key>readme.txt</Key>" in listing, f"anonymous listing: {listing[:200]!r}")
check(bob.get_object(Bucket="open-data", Key="readme.txt")["Body"].read() == b"for everyone", "another user reads")
check(error_code(bob.put_object, Bucket="open-data", Key="x", Body=b"x")[1] == 403, "another user writes")
try:
    urllib.request.urlopen(urllib.request.Request(f"{ENDPOINT}/open-data/x", data=b"x", method="PUT"))
    raise AssertionError("an anonymous PUT worked")
except urllib.error.HTTPError as e:
    check(e.code == 403, f"anonymous PUT: {e.code}")
grants = s3.get_bucket_acl(Bucket="open-data")["Grants"]
check(any(g["Grantee"].get("URI", "").endswith("/AllUsers") and g["Permission"] == "READ" for g in grants), f"acl {grants}")
check(error_code(s3.put_object, Bucket="photos", Key="x", Body=b"x", ACL="public-read")[1] == 501,
      "a public object in a private bucket is refused, not ignored")
s3.put_bucket_acl(Bucket="open-data", ACL="private")
try:
    urllib.request.urlopen(f"{ENDPOINT}/open-data/readme.txt")
    raise AssertionError("an anonymous GET of a private bucket worked")
except urllib.error.HTTPError as e:
    check(e.code == 403, f"anonymous GET after private: {e.code}")
check(len(s3.get_bucket_acl(Bucket="open-data")["Grants"]) == 1, "private: the owner's grant only")
s3.delete_object(Bucket="open-data", Key="readme.txt")
s3.delete_bucket(Bucket="open-data")

# Virtual-hosted addressing: BUCKET.localhost names the bucket. (This
# resolver does not know *.localhost, so boto3's lookups of it are
# pointed at 127.0.0.1.)
import socket
import urllib.parse
real_getaddrinfo = socket.getaddrinfo
socket.getaddrinfo = lambda host, *a, **k: real_getaddrinfo(
    "127.0.0.1" if isinstance(host, str) and host.endswith(".localhost") else host, *a, **k)
port = urllib.parse.urlsplit(ENDPOINT).port
virtual = boto3.client("s3", endpoint_url=f"http://localhost:{port}", aws_access_key_id=os.environ["S3_KEY"],
                       aws_secret_access_key=os.environ["S3_SECRET"], region_name="us-east-1",
                       config=Config(s3={"addressing_style": "virtual"}, retries={"max_attempts": 1}))
virtual.put_object(Bucket="photos", Key="vhost", Body=b"virtual")
check(s3.get_object(Bucket="photos", Key="vhost")["Body"].read() == b"virtual", "a virtual-hosted PUT")
check([o["Key"] for o in virtual.list_objects_v2(Bucket="photos", Prefix="vhost")["Contents"]] == ["vhost"],
      "a virtual-hosted listing")
virtual.delete_object(Bucket="photos", Key="vhost")
socket.getaddrinfo = real_getaddrinfo

# Multipart uploads: parts, listing them, completing, reading across
# part boundaries, S3's errors, aborting; and boto3's managed transfer.
MiB = 1 << 20
p1, p2, p3 = os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(MiB + 7)
mp = s3.create_multipart_upload(Bucket="photos", Key="big", ContentType="video/x-test", Metadata={"k": "v"})
uid = mp["UploadId"]
etags = [s3.upload_part(Bucket="photos", Key="big", UploadId=uid, PartNumber=n, Body=b)["ETag"]
         for n, b in [(1, p1), (2, p2), (3, p3)]]
check(etags[0] == f'"{hashlib.md5(p1).hexdigest()}"', "part etag")
listed_parts = s3.list_parts(Bucket="photos", Key="big", UploadId=uid)["Parts"]
check([(p["PartNumber"], p["Size"]) for p in listed_parts] == [(1, 5 * MiB), (2, 5 * MiB), (3, MiB + 7)], f"list_parts {listed_parts}")
parts = [{"PartNumber": n, "ETag": e} for n, e in zip([1, 2, 3], etags)]
check(error_code(s3.complete_multipart_upload, Bucket="photos", Key="big", UploadId=uid,
                 MultipartUpload={"Parts": [parts[1], parts[0], parts[2]]})[0] == "InvalidPartOrder", "reordered parts")
check(error_code(s3.complete_multipart_upload, Bucket="photos", Key="big", UploadId=uid,
                 MultipartUpload={"Parts": parts + [{"PartNumber": 4, "ETag": etags[0]}]})[0] == "InvalidPart", "a missing part")
check(error_code(s3.complete_multipart_upload, Bucket="photos", Key="big", UploadId=uid,
                 MultipartUpload={"Parts": [parts[2], {"PartNumber": 4, "ETag": etags[2]}]})[0] in ("InvalidPart", "InvalidPartOrder"), "bad list")
done = s3.complete_multipart_upload(Bucket="photos", Key="big", UploadId=uid, MultipartUpload={"Parts": parts})
want_etag = hashlib.md5(b"".join(hashlib.md5(b).digest() for b in (p1, p2, p3))).hexdigest() + "-3"
check(done["ETag"] == f'"{want_etag}"', f"multipart etag {done['ETag']} != {want_etag}")
whole = p1 + p2 + p3
got = s3.get_object(Bucket="photos", Key="big")
check(got["ContentLength"] == len(whole) and got["Body"].read() == whole, "multipart object read back")
check(got["ContentType"] == "video/x-test" and got["Metadata"] == {"k": "v"}, "multipart metadata")
across = s3.get_object(Bucket="photos", Key="big", Range=f"bytes={5 * MiB - 10}-{10 * MiB + 9}")["Body"].read()
check(across == whole[5 * MiB - 10:10 * MiB + 10], "a range across three parts")
check(error_code(s3.list_parts, Bucket="photos", Key="big", UploadId=uid)[0] == "NoSuchUpload", "completed upload gone")
small = s3.create_multipart_upload(Bucket="photos", Key="small-parts")["UploadId"]
e1 = s3.upload_part(Bucket="photos", Key="small-parts", UploadId=small, PartNumber=1, Body=b"tiny")["ETag"]
e2 = s3.upload_part(Bucket="photos", Key="small-parts", UploadId=small, PartNumber=2, Body=b"tail")["ETag"]
check(error_code(s3.complete_multipart_upload, Bucket="photos", Key="small-parts", UploadId=small,
                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})[0] == "EntityTooSmall", "small part")
s3.abort_multipart_upload(Bucket="photos", Key="small-parts", UploadId=small)
check(error_code(s3.list_parts, Bucket="photos", Key="small-parts", UploadId=small)[0] == "NoSuchUpload", "aborted")
check(error_code(s3.head_object, Bucket="photos", Key="small-parts")[1] == 404, "nothing visible after abort")
check(error_code(s3.upload_part, Bucket="photos", Key="big", UploadId="00ff", PartNumber=1, Body=b"x")[0] == "NoSuchUpload", "unknown upload")
import io
from boto3.s3.transfer import TransferConfig
managed = os.urandom(13 * MiB + 5)
s3.upload_fileobj(io.BytesIO(managed), "photos", "managed",
                  Config=TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, max_concurrency=4))
out = io.BytesIO()
s3.download_fileobj("photos", "managed", out, Config=TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB))
check(out.getvalue() == managed, "managed multipart transfer")
check(s3.head_object(Bucket="photos", Key="managed")["ETag"].endswith('-3"'), "managed upload was multipart")
s3.put_object(Bucket="photos", Key="managed", Body=b"now small")
check(s3.get_object(Bucket="photos", Key="managed")["Body"].read() == b"now small", "a multipart object overwritten")

# Copies: metadata copied or replaced, across buckets, conditional.
s3.create_bucket(Bucket="archive")
src = s3.head_object(Bucket="photos", Key="sha")
cp = s3.copy_object(Bucket="archive", Key="sha-copy", CopySource={"Bucket": "photos", "Key": "sha"})
check(cp["CopyObjectResult"]["ETag"] == src["ETag"], "copy keeps the etag")
check(s3.get_object(Bucket="archive", Key="sha-copy")["Body"].read() == b"hello", "copied bytes")
s3.put_object(Bucket="photos", Key="meta", Body=b"m", ContentType="text/plain", Metadata={"a": "1"})
s3.copy_object(Bucket="photos", Key="meta2", CopySource="photos/meta")
h2 = s3.head_object(Bucket="photos", Key="meta2")
check(h2["ContentType"] == "text/plain" and h2["Metadata"] == {"a": "1"}, f"COPY directive: {h2['Metadata']}")
s3.copy_object(Bucket="photos", Key="meta2", CopySource="photos/meta", MetadataDirective="REPLACE",
               ContentType="text/csv", Metadata={"b": "2"})
h3 = s3.head_object(Bucket="photos", Key="meta2")
check(h3["ContentType"] == "text/csv" and h3["Metadata"] == {"b": "2"}, f"REPLACE directive: {h3['Metadata']}")
check(error_code(s3.copy_object, Bucket="photos", Key="meta", CopySource="photos/meta")[0] == "InvalidRequest", "copy onto itself")
check(error_code(s3.copy_object, Bucket="photos", Key="x", CopySource="photos/nope")[0] == "NoSuchKey", "copy of a missing key")
check(error_code(s3.copy_object, Bucket="photos", Key="x", CopySource="photos/meta", CopySourceIfMatch='"00"')[0] == "PreconditionFailed", "copy-source-if-match")
check(error_code(bob.copy_object, Bucket="photos", Key="x", CopySource="photos/meta")[0] == "AccessDenied", "bob copies alice's")
every = sorted(every + ["meta", "meta2", "big", "managed"])

# Large objects: a single PUT above the 4 MiB kept in the head streams
# into tail objects (70 MiB: above the first part's 64 MiB limit), reads
# and ranges across pieces, copies, a body refused late, partNumber
# reads, UploadPartCopy with ranges, ListMultipartUploads, Expires.
large = os.urandom(70 * MiB + 3)
r = s3.put_object(Bucket="photos", Key="large", Body=large)
check(r["ETag"] == f'"{hashlib.md5(large).hexdigest()}"', "large PUT etag")
got = s3.get_object(Bucket="photos", Key="large")
check(got["ContentLength"] == len(large) and got["Body"].read() == large, "large object read back")
mid = s3.get_object(Bucket="photos", Key="large", Range=f"bytes={4 * MiB - 5}-{12 * MiB + 4}")["Body"].read()
check(mid == large[4 * MiB - 5:12 * MiB + 5], "a range across pieces")
s3.copy_object(Bucket="photos", Key="large-copy", CopySource="photos/large")
s3.delete_object(Bucket="photos", Key="large")
check(s3.get_object(Bucket="photos", Key="large-copy")["Body"].read() == large, "a large copy outlives its source")
check(error_code(s3.put_object, Bucket="photos", Key="refused", Body=large[:9 * MiB],
                 ChecksumCRC32="AAAAAA==")[0] == "BadDigest", "a large body with a wrong checksum")
check(error_code(s3.head_object, Bucket="photos", Key="refused")[1] == 404, "nothing of a refused large body")
part = s3.get_object(Bucket="photos", Key="big", PartNumber=2)
check(part["Body"].read() == p2 and part["PartsCount"] == 3 and part["ContentLength"] == 5 * MiB, "a partNumber read")
check(s3.head_object(Bucket="photos", Key="big", PartNumber=3)["ContentLength"] == MiB + 7, "a partNumber HEAD")
check(error_code(s3.get_object, Bucket="photos", Key="big", PartNumber=4)[1] == 416, "a part past the last")
check(s3.get_object(Bucket="photos", Key="meta", PartNumber=1)["Body"].read() == b"m", "part 1 of a plain object")
u1 = s3.create_multipart_upload(Bucket="photos", Key="assembled")["UploadId"]
u2 = s3.create_multipart_upload(Bucket="photos", Key="dir/other")["UploadId"]
ups = s3.list_multipart_uploads(Bucket="photos")
check([(x["Key"], x["UploadId"]) for x in ups["Uploads"]] == [("assembled", u1), ("dir/other", u2)], f"uploads {ups}")
ups = s3.list_multipart_uploads(Bucket="photos", Delimiter="/")
check([x["Key"] for x in ups["Uploads"]] == ["assembled"] and [c["Prefix"] for c in ups["CommonPrefixes"]] == ["dir/"],
      f"uploads with a delimiter {ups}")
ups = s3.list_multipart_uploads(Bucket="photos", MaxUploads=1)
check(ups["IsTruncated"] and ups["NextKeyMarker"] == "assembled", f"a page of uploads {ups}")
ups = s3.list_multipart_uploads(Bucket="photos", KeyMarker=ups["NextKeyMarker"], UploadIdMarker=ups["NextUploadIdMarker"])
check([x["Key"] for x in ups["Uploads"]] == ["dir/other"] and not ups["IsTruncated"], f"the next page {ups}")
c1 = s3.upload_part_copy(Bucket="photos", Key="assembled", UploadId=u1, PartNumber=1,
                         CopySource="photos/large-copy", CopySourceRange=f"bytes=0-{6 * MiB - 1}")
check(c1["CopyPartResult"]["ETag"] == f'"{hashlib.md5(large[:6 * MiB]).hexdigest()}"', "a part copy's etag")
c2 = s3.upload_part_copy(Bucket="photos", Key="assembled", UploadId=u1, PartNumber=2,
                         CopySource="photos/big", CopySourceRange=f"bytes={MiB}-{MiB + 99}")
check(error_code(s3.upload_part_copy, Bucket="photos", Key="assembled", UploadId=u1, PartNumber=3,
                 CopySource="photos/big", CopySourceRange=f"bytes=0-{len(whole)}")[0] == "InvalidRange", "a copy range past the end")
again = os.urandom(5 * MiB)
e1 = s3.upload_part(Bucket="photos", Key="assembled", UploadId=u1, PartNumber=1, Body=again)["ETag"]
s3.complete_multipart_upload(Bucket="photos", Key="assembled", UploadId=u1, MultipartUpload={"Parts": [
    {"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": c2["CopyPartResult"]["ETag"]}]})
check(s3.get_object(Bucket="photos", Key="assembled")["Body"].read() == again + whole[MiB:MiB + 100],
      "an object assembled from a part uploaded again and a part copy")
s3.abort_multipart_upload(Bucket="photos", Key="dir/other", UploadId=u2)
check(not s3.list_multipart_uploads(Bucket="photos").get("Uploads"), "no uploads left")
import datetime
expires = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
s3.put_object(Bucket="photos", Key="expiring", Body=b"e", Expires=expires)
h = s3.head_object(Bucket="photos", Key="expiring")
check(h.get("ExpiresString") == "Wed, 02 Jan 2030 03:04:05 GMT" or h.get("Expires") == expires, f"Expires {h}")
every = sorted(every + ["large-copy", "assembled", "expiring"])

# Multipart checksums: composite (SHA256 of the parts' SHA256s, "-N")
# and full-object (the CRC32 of all the bytes, combined from the parts').
MiB = 1 << 20
q1, q2 = os.urandom(5 * MiB), os.urandom(2 * MiB + 3)
up = s3.create_multipart_upload(Bucket="photos", Key="sha-mp", ChecksumAlgorithm="SHA256")
check(up.get("ChecksumType") == "COMPOSITE", f"SHA256 is composite by default: {up}")
parts = []
for n, data in ((1, q1), (2, q2)):
    r = s3.upload_part(Bucket="photos", Key="sha-mp", UploadId=up["UploadId"], PartNumber=n, Body=data,
                       ChecksumAlgorithm="SHA256")
    parts.append({"PartNumber": n, "ETag": r["ETag"], "ChecksumSHA256": r["ChecksumSHA256"]})
listed = s3.list_parts(Bucket="photos", Key="sha-mp", UploadId=up["UploadId"])
check([p.get("ChecksumSHA256") for p in listed["Parts"]] == [p["ChecksumSHA256"] for p in parts], f"list_parts: {listed}")
done = s3.complete_multipart_upload(Bucket="photos", Key="sha-mp", UploadId=up["UploadId"],
                                    MultipartUpload={"Parts": parts})
composite = base64.b64encode(hashlib.sha256(hashlib.sha256(q1).digest() + hashlib.sha256(q2).digest()).digest()).decode() + "-2"
check(done.get("ChecksumSHA256") == composite and done.get("ChecksumType") == "COMPOSITE", f"composite: {done}")
head = s3.head_object(Bucket="photos", Key="sha-mp", ChecksumMode="ENABLED")
check(head.get("ChecksumSHA256") == composite and head.get("ChecksumType") == "COMPOSITE", f"HEAD: {head}")
s3.delete_object(Bucket="photos", Key="sha-mp")

up = s3.create_multipart_upload(Bucket="photos", Key="crc-mp", ChecksumAlgorithm="CRC32", ChecksumType="FULL_OBJECT")
parts = []
for n, data in ((1, q1), (2, q2)):
    r = s3.upload_part(Bucket="photos", Key="crc-mp", UploadId=up["UploadId"], PartNumber=n, Body=data,
                       ChecksumAlgorithm="CRC32")
    parts.append({"PartNumber": n, "ETag": r["ETag"], "ChecksumCRC32": r["ChecksumCRC32"]})
full = base64.b64encode(zlib.crc32(q1 + q2).to_bytes(4, "big")).decode()
wrong_part = [dict(parts[0], ChecksumCRC32=parts[1]["ChecksumCRC32"]), parts[1]]
check(error_code(s3.complete_multipart_upload, Bucket="photos", Key="crc-mp", UploadId=up["UploadId"],
                 MultipartUpload={"Parts": wrong_part})[0] == "InvalidPart", "a part's checksum that is not its own")
check(error_code(s3.complete_multipart_upload, Bucket="photos", Key="crc-mp", UploadId=up["UploadId"],
                 MultipartUpload={"Parts": parts}, ChecksumCRC32="AAAAAA==", ChecksumType="FULL_OBJECT")[0] == "BadDigest",
      "a whole-object checksum that does not match")
done = s3.complete_multipart_upload(Bucket="photos", Key="crc-mp", UploadId=up["UploadId"],
                                    MultipartUpload={"Parts": parts}, ChecksumCRC32=full, ChecksumType="FULL_OBJECT")
check(done.get("ChecksumCRC32") == full and done.get("ChecksumType") == "FULL_OBJECT", f"full object: {done}")
# boto3 checks a full-object CRC32 on GET against the bytes it reads.
got = s3.get_object(Bucket="photos", Key="crc-mp", ChecksumMode="ENABLED")
check(got.get("ChecksumCRC32") == full and got["Body"].read() == q1 + q2, "GET checked by boto3")
s3.delete_object(Bucket="photos", Key="crc-mp")
check(error_code(s3.create_multipart_upload, Bucket="photos", Key="x", ChecksumAlgorithm="SHA256",
                 ChecksumType="FULL_OBJECT")[0] == "InvalidRequest", "SHA256 has no full-object checksum")

# Tagging: on PUT, put/get/delete, copies (tags copied or replaced), the
# count on GET, bucket tags, S3's errors.
s3.put_object(Bucket="photos", Key="tagged", Body=b"t", Tagging="project=cairn&team=storage%20core")
tags = s3.get_object_tagging(Bucket="photos", Key="tagged")["TagSet"]
check(tags == [{"Key": "project", "Value": "cairn"}, {"Key": "team", "Value": "storage core"}], f"tags on PUT {tags}")
check(s3.get_object(Bucket="photos", Key="tagged")["TagCount"] == 2, "x-amz-tagging-count")
s3.put_object_tagging(Bucket="photos", Key="tagged", Tagging={"TagSet": [{"Key": "a", "Value": "1"}]})
check(s3.get_object_tagging(Bucket="photos", Key="tagged")["TagSet"] == [{"Key": "a", "Value": "1"}], "tags replaced")
check(error_code(s3.put_object_tagging, Bucket="photos", Key="tagged",
                 Tagging={"TagSet": [{"Key": "aws:x", "Value": "1"}]})[0] == "InvalidTag", "a reserved tag key")
check(error_code(s3.put_object_tagging, Bucket="photos", Key="nope",
                 Tagging={"TagSet": [{"Key": "a", "Value": "1"}]})[0] == "NoSuchKey", "tags of a missing key")
check(error_code(s3.put_object, Bucket="photos", Key="badtags", Body=b"x", Tagging="a=1&a=2")[0] == "InvalidTag", "duplicate tag keys")
s3.copy_object(Bucket="photos", Key="tagged2", CopySource="photos/tagged")
check(s3.get_object_tagging(Bucket="photos", Key="tagged2")["TagSet"] == [{"Key": "a", "Value": "1"}], "tags copied")
s3.copy_object(Bucket="photos", Key="tagged3", CopySource="photos/tagged", TaggingDirective="REPLACE", Tagging="b=2")
check(s3.get_object_tagging(Bucket="photos", Key="tagged3")["TagSet"] == [{"Key": "b", "Value": "2"}], "tags replaced on copy")
s3.delete_object_tagging(Bucket="photos", Key="tagged")
check(s3.get_object_tagging(Bucket="photos", Key="tagged")["TagSet"] == [], "tags deleted")
check(s3.get_object(Bucket="photos", Key="tagged")["Body"].read() == b"t", "tagging leaves the bytes")
check(error_code(s3.get_bucket_tagging, Bucket="photos")[0] == "NoSuchTagSet", "no bucket tags yet")
s3.put_bucket_tagging(Bucket="photos", Tagging={"TagSet": [{"Key": "cost-center", "Value": "hpc"}]})
check(s3.get_bucket_tagging(Bucket="photos")["TagSet"] == [{"Key": "cost-center", "Value": "hpc"}], "bucket tags")
s3.delete_bucket_tagging(Bucket="photos")
check(error_code(s3.get_bucket_tagging, Bucket="photos")[0] == "NoSuchTagSet", "bucket tags deleted")
every = sorted(every + ["tagged", "tagged2", "tagged3"])

# DeleteObjects, quiet and not, with a missing key (deleting it is fine).
s3.put_object(Bucket="archive", Key="k1", Body=b"1")
s3.put_object(Bucket="archive", Key="k2", Body=b"2")
res = s3.delete_objects(Bucket="archive", Delete={"Objects": [{"Key": "k1"}, {"Key": "k2"}, {"Key": "none"}]})
check(sorted(d["Key"] for d in res["Deleted"]) == ["k1", "k2", "none"] and not res.get("Errors"), f"delete_objects: {res}")
res = s3.delete_objects(Bucket="archive", Delete={"Objects": [{"Key": "sha-copy"}], "Quiet": True})
check(not res.get("Deleted") and not res.get("Errors"), f"quiet delete_objects: {res}")
check(s3.list_objects_v2(Bucket="archive")["KeyCount"] == 0, "archive emptied")
s3.delete_bucket(Bucket="archive")

# Deletes.
check(error_code(s3.delete_bucket, Bucket="photos")[0] == "BucketNotEmpty", "non-empty bucket")
s3.delete_object(Bucket="photos", Key="c")
check(error_code(s3.get_object, Bucket="photos", Key="c")[0] == "NoSuchKey", "deleted")
s3.delete_object(Bucket="photos", Key="never-was")
for key in every:
    s3.delete_object(Bucket="photos", Key=key)
check(s3.list_objects_v2(Bucket="photos")["KeyCount"] == 0, "emptied")
s3.delete_bucket(Bucket="photos")
check(error_code(s3.head_bucket, Bucket="photos")[1] == 404, "bucket gone")
s3.create_bucket(Bucket="photos")
check(s3.list_objects_v2(Bucket="photos")["KeyCount"] == 0, "a bucket made again starts empty")
# A body of exactly one piece (4 MiB) stays whole in its head: the test
# then finds this one object in the pool, and no piece.
s3.create_bucket(Bucket="keep4m")
exact = os.urandom(4 * MiB)
s3.put_object(Bucket="keep4m", Key="exact4m", Body=exact)
check(s3.get_object(Bucket="keep4m", Key="exact4m")["Body"].read() == exact, "a 4 MiB object")
print("all S3 checks passed")
