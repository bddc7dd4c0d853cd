"""Versioning through boto3 at its default settings: enable and suspend,
version ids, reads and deletes by version id, delete markers, the null
version, copies of older versions, ListObjectVersions and its paging,
DeleteObjects with versions, and a bucket emptied of every version.

Env: S3_ENDPOINT, S3_KEY, S3_SECRET. Exits non-zero with the failed check
on any mismatch. Leaves nothing in the cluster's data pool.
"""
import hashlib
import os

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

MiB = 1 << 20
s3 = boto3.client(
    "s3",
    endpoint_url=os.environ["S3_ENDPOINT"],
    aws_access_key_id=os.environ["S3_KEY"],
    aws_secret_access_key=os.environ["S3_SECRET"],
    region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def error(call, **kwargs):
    try:
        call(**kwargs)
    except ClientError as e:
        return (e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"],
                e.response["ResponseMetadata"].get("HTTPHeaders", {}))
    raise AssertionError(f"{call.__name__} {kwargs} succeeded, an error was expected")


def body(key, version=None, bucket="vers"):
    extra = {"VersionId": version} if version else {}
    return s3.get_object(Bucket=bucket, Key=key, **extra)["Body"].read()


def versions(bucket="vers", **kwargs):
    """Every version and delete marker as (key, id, latest, marker), by key
    (boto3 gives the two kinds apart; each in S3's order), and the answer."""
    res = s3.list_object_versions(Bucket=bucket, **kwargs)
    entries = [(v["Key"], v["VersionId"], v["IsLatest"], False) for v in res.get("Versions", [])]
    entries += [(d["Key"], d["VersionId"], d["IsLatest"], True) for d in res.get("DeleteMarkers", [])]
    return sorted(entries, key=lambda e: e[0]), res


s3.create_bucket(Bucket="vers")
check("Status" not in s3.get_bucket_versioning(Bucket="vers"), "a new bucket is unversioned")
pre = s3.put_object(Bucket="vers", Key="pre", Body=b"before versioning")
check("VersionId" not in pre, f"no version id before versioning: {pre}")

s3.put_bucket_versioning(Bucket="vers", VersioningConfiguration={"Status": "Enabled"})
check(s3.get_bucket_versioning(Bucket="vers")["Status"] == "Enabled", "enabled")

# Three versions of k: small, large (pieces), small.
large = os.urandom(9 * MiB)
bodies = [b"one", large, b"three"]
ids = [s3.put_object(Bucket="vers", Key="k", Body=b)["VersionId"] for b in bodies]
check(len(set(ids)) == 3 and all(len(i) == 32 for i in ids), f"distinct version ids: {ids}")
check(body("k") == b"three", "the latest")
for version, expected in zip(ids, bodies):
    check(body("k", version) == expected, f"version {version}")
head = s3.head_object(Bucket="vers", Key="k", VersionId=ids[1])
check(head["ContentLength"] == 9 * MiB and head["VersionId"] == ids[1], f"head by version: {head}")
ranged = s3.get_object(Bucket="vers", Key="k", VersionId=ids[1], Range="bytes=4194300-4194310")["Body"].read()
check(ranged == large[4194300:4194311], "a range of an older version, across pieces")
check(s3.head_object(Bucket="vers", Key="pre", VersionId="null")["ContentLength"] == 17, "the null version by id")
check(s3.head_object(Bucket="vers", Key="pre")["VersionId"] == "null", "an object from before is the null version")
check(error(s3.get_object, Bucket="vers", Key="k", VersionId="not-a-version")[:2] == ("InvalidArgument", 400),
      "a malformed version id")
check(error(s3.get_object, Bucket="vers", Key="k", VersionId="0" * 32)[:2] == ("NoSuchVersion", 404),
      "an unknown version id")

listed, _ = versions()
k_versions = [(v[1], v[2]) for v in listed if v[0] == "k"]
check(k_versions == [(ids[2], True), (ids[1], False), (ids[0], False)], f"k's versions, newest first: {k_versions}")
check(("pre", "null", True, False) in listed, f"the null version listed: {listed}")

# A delete marker hides the key; deleting the marker brings it back.
deleted = s3.delete_object(Bucket="vers", Key="k")
check(deleted.get("DeleteMarker") is True and len(deleted.get("VersionId", "")) == 32, f"delete marker: {deleted}")
marker = deleted["VersionId"]
code, status, headers = error(s3.get_object, Bucket="vers", Key="k")
check((code, status) == ("NoSuchKey", 404), "a deleted key")
check(headers.get("x-amz-delete-marker") == "true" and headers.get("x-amz-version-id") == marker,
      f"the marker's headers: {headers}")
check(error(s3.head_object, Bucket="vers", Key="k")[1] == 404, "HEAD of a deleted key")
check(error(s3.get_object, Bucket="vers", Key="k", VersionId=marker)[:2] == ("MethodNotAllowed", 405),
      "GET of a delete marker by id")
check([o["Key"] for o in s3.list_objects_v2(Bucket="vers").get("Contents", [])] == ["pre"], "a listing skips it")
listed, res = versions(Prefix="k")
check([(m["VersionId"], m["IsLatest"]) for m in res["DeleteMarkers"]] == [(marker, True)], f"the marker: {res}")
check(not any(v["IsLatest"] for v in res["Versions"]), "no version of k is the latest")
# Create-only PUT: allowed over a delete marker, refused over an object.
made = s3.put_object(Bucket="vers", Key="k", Body=b"four", IfNoneMatch="*")
check(error(s3.put_object, Bucket="vers", Key="k", Body=b"five", IfNoneMatch="*")[:2] == ("PreconditionFailed", 412),
      "create-only over a live object")
s3.delete_object(Bucket="vers", Key="k", VersionId=made["VersionId"])
check(error(s3.get_object, Bucket="vers", Key="k")[0] == "NoSuchKey", "the marker is the latest again")
gone = s3.delete_object(Bucket="vers", Key="k", VersionId=marker)
check(gone.get("DeleteMarker") is True and gone.get("VersionId") == marker, f"deleting the marker: {gone}")
check(body("k") == b"three", "the key is back")

# Deleting the latest version makes the newest older one the latest.
s3.delete_object(Bucket="vers", Key="k", VersionId=ids[2])
check(body("k") == large, "the older version is the latest")
check(s3.head_object(Bucket="vers", Key="k")["VersionId"] == ids[1], "with its own id")
# Deleting an older version removes only it.
s3.delete_object(Bucket="vers", Key="k", VersionId=ids[0])
check(error(s3.get_object, Bucket="vers", Key="k", VersionId=ids[0])[:2] == ("NoSuchVersion", 404), "deleted version")
check([v[1] for v in versions(Prefix="k")[0]] == [ids[1]], "one version left")
# Deleting a version that is not there is done.
s3.delete_object(Bucket="vers", Key="k", VersionId=ids[0])

# Copies: of an older version to another key, and over its own key
# (restoring it).
again = s3.put_object(Bucket="vers", Key="k", Body=b"newest")["VersionId"]
copied = s3.copy_object(Bucket="vers", Key="k-copy", CopySource={"Bucket": "vers", "Key": "k", "VersionId": ids[1]})
check(copied["CopySourceVersionId"] == ids[1] and len(copied["VersionId"]) == 32, f"copy: {copied}")
check(body("k-copy") == large, "a copy of an older version")
restored = s3.copy_object(Bucket="vers", Key="k", CopySource={"Bucket": "vers", "Key": "k", "VersionId": ids[1]})
check(body("k") == large and restored["VersionId"] not in (ids[1], again), "an older version restored")
check(len(versions(Prefix="k-")[0]) == 1 and len(versions(Prefix="k")[0]) == 4, "k: 3 versions, k-copy: 1")

# Tags of one version.
s3.put_object_tagging(Bucket="vers", Key="k", VersionId=again, Tagging={"TagSet": [{"Key": "v", "Value": "old"}]})
tags = s3.get_object_tagging(Bucket="vers", Key="k", VersionId=again)
check(tags["TagSet"] == [{"Key": "v", "Value": "old"}] and tags["VersionId"] == again, f"version tags: {tags}")
check(s3.get_object_tagging(Bucket="vers", Key="k")["TagSet"] == [], "the latest has none")

# Multipart uploads make versions too.
upload = s3.create_multipart_upload(Bucket="vers", Key="mp")["UploadId"]
part = s3.upload_part(Bucket="vers", Key="mp", UploadId=upload, PartNumber=1, Body=os.urandom(5 * MiB))
done = s3.complete_multipart_upload(Bucket="vers", Key="mp", UploadId=upload,
                                    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
check(len(done.get("VersionId", "")) == 32, f"a completed upload's version: {done}")
s3.put_object(Bucket="vers", Key="mp", Body=b"small over multipart")
check(s3.head_object(Bucket="vers", Key="mp", VersionId=done["VersionId"])["ContentLength"] == 5 * MiB,
      "the multipart version stays")

# Suspended: writes make the null version, replacing the null version.
s3.put_bucket_versioning(Bucket="vers", VersioningConfiguration={"Status": "Suspended"})
check(s3.get_bucket_versioning(Bucket="vers")["Status"] == "Suspended", "suspended")
s3.put_object(Bucket="vers", Key="s", Body=b"s-old")  # null
s3.put_bucket_versioning(Bucket="vers", VersioningConfiguration={"Status": "Enabled"})
kept = s3.put_object(Bucket="vers", Key="s", Body=b"s-kept")["VersionId"]  # null archived
s3.put_bucket_versioning(Bucket="vers", VersioningConfiguration={"Status": "Suspended"})
put = s3.put_object(Bucket="vers", Key="s", Body=b"s-new")
check(put.get("VersionId") == "null", f"a suspended PUT makes the null version: {put}")
s3.put_object(Bucket="vers", Key="s", Body=os.urandom(6 * MiB))
s3.put_object(Bucket="vers", Key="s", Body=b"s-newest")
s_versions = [(v[1], v[2]) for v in versions(Prefix="s")[0]]
check(s_versions == [("null", True), (kept, False)], f"one null version, and the enabled one: {s_versions}")
check(body("s", "null") == b"s-newest" and body("s", kept) == b"s-kept", "their bytes")
dm = s3.delete_object(Bucket="vers", Key="s")
check(dm.get("DeleteMarker") is True and dm.get("VersionId") == "null", f"a suspended delete: {dm}")
s_versions = [(v[1], v[2], v[3]) for v in versions(Prefix="s")[0]]
check(sorted(s_versions) == sorted([("null", True, True), (kept, False, False)]), f"after it: {s_versions}")

# Paging: two at a time gives what one page gives, in order.
s3.put_bucket_versioning(Bucket="vers", VersioningConfiguration={"Status": "Enabled"})
for i in range(3):
    s3.put_object(Bucket="vers", Key="dir/a", Body=b"a%d" % i)
    s3.put_object(Bucket="vers", Key="dir/b", Body=b"b%d" % i)
whole = s3.list_object_versions(Bucket="vers")
everything = [(v["Key"], v["VersionId"]) for v in sorted(
    whole.get("Versions", []) + whole.get("DeleteMarkers", []), key=lambda v: v["Key"])]
paged, kwargs, pages = [], {}, 0
while True:
    res = s3.list_object_versions(Bucket="vers", MaxKeys=2, **kwargs)
    page = sorted(res.get("Versions", []) + res.get("DeleteMarkers", []), key=lambda v: v["Key"])
    check(len(page) <= 2, f"a page of at most 2: {page}")
    paged += [(v["Key"], v["VersionId"]) for v in page]
    pages += 1
    if not res["IsTruncated"]:
        break
    kwargs = {"KeyMarker": res["NextKeyMarker"], "VersionIdMarker": res["NextVersionIdMarker"]}
check(sorted(paged) == sorted(everything) and len(paged) == len(set(paged)),
      f"paged {paged}\nwhole {everything}")
check(pages >= len(everything) // 2, f"{pages} pages")
rolled = s3.list_object_versions(Bucket="vers", Delimiter="/")
check([p["Prefix"] for p in rolled.get("CommonPrefixes", [])] == ["dir/"], f"common prefixes: {rolled}")
check(not any(v["Key"].startswith("dir/") for v in rolled.get("Versions", [])), "rolled up")

# Races on one key: threads PUT versions (some in pieces) and delete
# every other one of their own by id, often while it is the latest.
# Every version acknowledged and not deleted must be listed once and read
# back whole; every deleted one must be gone.
import concurrent.futures
import threading
racer = boto3.client(
    "s3",
    endpoint_url=os.environ["S3_ENDPOINT"],
    aws_access_key_id=os.environ["S3_KEY"],
    aws_secret_access_key=os.environ["S3_SECRET"],
    region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 8, "mode": "standard"},
                  max_pool_connections=16),
)
s3.create_bucket(Bucket="race")
s3.put_bucket_versioning(Bucket="race", VersioningConfiguration={"Status": "Enabled"})
acked, removed, lock = {}, set(), threading.Lock()


def race(thread):
    for i in range(8):
        body = os.urandom(5 * MiB) if i % 4 == 0 else b"%d-%d" % (thread, i)
        vid = racer.put_object(Bucket="race", Key="hot", Body=body)["VersionId"]
        with lock:
            acked[vid] = hashlib.md5(body).hexdigest()
        if i % 2:
            racer.delete_object(Bucket="race", Key="hot", VersionId=vid)
            with lock:
                removed.add(vid)


with concurrent.futures.ThreadPoolExecutor(6) as pool:
    list(pool.map(race, range(6)))
listed = []
kwargs = {}
while True:
    res = s3.list_object_versions(Bucket="race", MaxKeys=7, **kwargs)
    listed += [v["VersionId"] for v in res.get("Versions", [])]
    check(not res.get("DeleteMarkers"), "no delete markers were made")
    if not res["IsTruncated"]:
        break
    kwargs = {"KeyMarker": res["NextKeyMarker"], "VersionIdMarker": res["NextVersionIdMarker"]}
check(len(listed) == len(set(listed)), f"a version listed twice: {listed}")
check(set(listed) == set(acked) - removed,
      f"listed {len(listed)}, acknowledged {len(acked)}, deleted {len(removed)}: "
      f"missing {set(acked) - removed - set(listed)}, extra {set(listed) - (set(acked) - removed)}")
for vid in listed:
    got = hashlib.md5(s3.get_object(Bucket="race", Key="hot", VersionId=vid)["Body"].read()).hexdigest()
    check(got == acked[vid], f"version {vid} read back whole")
for vid in removed:
    check(error(s3.head_object, Bucket="race", Key="hot", VersionId=vid)[1] in (404, 400), f"deleted {vid}")
latest = s3.head_object(Bucket="race", Key="hot")["VersionId"]
check(latest == listed[0], f"the latest is listed first: {latest} vs {listed[0]}")
for vid in listed:
    s3.delete_object(Bucket="race", Key="hot", VersionId=vid)
s3.delete_bucket(Bucket="race")

# A bucket with versions is not empty; DeleteObjects with version ids
# empties it.
check(error(s3.delete_bucket, Bucket="vers")[0] == "BucketNotEmpty", "versions keep a bucket")
while True:
    res = s3.list_object_versions(Bucket="vers")
    entries = res.get("Versions", []) + res.get("DeleteMarkers", [])
    if not entries:
        break
    out = s3.delete_objects(Bucket="vers", Delete={
        "Objects": [{"Key": v["Key"], "VersionId": v["VersionId"]} for v in entries]})
    check(not out.get("Errors") and len(out["Deleted"]) == len(entries), f"delete_objects: {out}")
    check(all(d.get("VersionId") for d in out["Deleted"]), "each names its version")
check(s3.list_objects_v2(Bucket="vers")["KeyCount"] == 0, "no keys")
s3.delete_bucket(Bucket="vers")
print("all versioning checks passed")
