"""A versioned write cut by a gateway that stops at a crash point
(`CAIRN_S3_CRASH_AT`), then recovered by `cairn s3 gc`.

    versioning_crash.py stage POINT   -- with the crashing gateway
    versioning_crash.py check POINT   -- with a new gateway, after gc
    versioning_crash.py clean         -- deletes every version and bucket

Each point has its own bucket. Env: S3_ENDPOINT, S3_KEY, S3_SECRET.
"""
import os
import sys

import boto3
from botocore.config import Config

MiB = 1 << 20
s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"], aws_access_key_id=os.environ["S3_KEY"],
                  aws_secret_access_key=os.environ["S3_SECRET"], region_name="us-east-1",
                  config=Config(retries={"max_attempts": 1}))
LARGE = bytes(range(256)) * (6 * MiB // 256)  # in pieces, so its tails must survive


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


def bucket(point):
    return "crash-" + point


def listing(name):
    res = s3.list_object_versions(Bucket=name)
    return sorted([(v["Key"], v["IsLatest"], v["Size"]) for v in res.get("Versions", [])], reverse=True)


def cut(call, **kwargs):
    """The call the gateway dies in: it must not succeed."""
    try:
        call(**kwargs)
    except Exception as e:  # the connection drops
        print("cut:", type(e).__name__, flush=True)
        return
    check(False, "the gateway did not stop at the crash point")


phase = sys.argv[1]
if phase == "stage":
    point = sys.argv[2]
    name = bucket(point)
    s3.create_bucket(Bucket=name)
    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    if point == "version-delete-promoted":
        s3.put_object(Bucket=name, Key="k", Body=LARGE)
        second = s3.put_object(Bucket=name, Key="k", Body=b"second")["VersionId"]
        cut(s3.delete_object, Bucket=name, Key="k", VersionId=second)
    else:
        s3.put_object(Bucket=name, Key="k", Body=LARGE)
        cut(s3.put_object, Bucket=name, Key="k", Body=b"second")
elif phase == "check":
    point = sys.argv[2]
    name = bucket(point)
    found = listing(name)
    if point == "versioned-put-archived":
        # The head was never replaced: one version, the first.
        check(found == [("k", True, len(LARGE))], f"versions {found}")
        check(s3.get_object(Bucket=name, Key="k")["Body"].read() == LARGE, "the first version")
    elif point == "versioned-put-head-written":
        # The head was replaced: the archive of the first is indexed.
        check(found == [("k", True, 6), ("k", False, len(LARGE))], f"versions {found}")
        res = s3.list_object_versions(Bucket=name)
        older = [v["VersionId"] for v in res["Versions"] if not v["IsLatest"]][0]
        check(s3.get_object(Bucket=name, Key="k", VersionId=older)["Body"].read() == LARGE, "the archived first")
        check(s3.get_object(Bucket=name, Key="k")["Body"].read() == b"second", "the second")
    else:
        # The first was promoted: its entry as an older version goes.
        check(found == [("k", True, len(LARGE))], f"versions {found}")
        check(s3.get_object(Bucket=name, Key="k")["Body"].read() == LARGE, "the promoted first")
    print("checked", flush=True)
else:
    for b in s3.list_buckets()["Buckets"]:
        name = b["Name"]
        while True:
            res = s3.list_object_versions(Bucket=name)
            entries = res.get("Versions", []) + res.get("DeleteMarkers", [])
            if not entries:
                break
            for v in entries:
                s3.delete_object(Bucket=name, Key=v["Key"], VersionId=v["VersionId"])
        s3.delete_bucket(Bucket=name)
    print("cleaned", flush=True)
