"""Live data for the orphan scan to leave alone (phase "stage"), and the
check that it is all still whole after `cairn s3 orphans --remove`
(phase "check").

In bucket "live", versioned: two versions of a 9 MiB object (in pieces:
one archived), a multipart object, a small object, a delete marker over
another, and an upload in progress with one part.

Env: S3_ENDPOINT, S3_KEY, S3_SECRET."""
import hashlib
import json
import os
import sys

import boto3
from botocore.config import Config

MiB = 1 << 20
s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"], aws_access_key_id=os.environ["S3_KEY"],
                  aws_secret_access_key=os.environ["S3_SECRET"], region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))


def pattern(seed, size):
    out = bytearray()
    block = hashlib.sha256(seed.encode()).digest() * 1024
    while len(out) < size:
        out += block
    return bytes(out[:size])


big1, big2 = pattern("big1", 9 * MiB), pattern("big2", 9 * MiB + 5)
p1, p2 = pattern("p1", 5 * MiB), pattern("p2", MiB)
pending = pattern("pending", 5 * MiB)
if sys.argv[1] == "stage":
    s3.create_bucket(Bucket="live")
    s3.put_bucket_versioning(Bucket="live", VersioningConfiguration={"Status": "Enabled"})
    first = s3.put_object(Bucket="live", Key="big", Body=big1)["VersionId"]
    s3.put_object(Bucket="live", Key="big", Body=big2)
    up = s3.create_multipart_upload(Bucket="live", Key="mp")["UploadId"]
    parts = [{"PartNumber": n, "ETag": s3.upload_part(Bucket="live", Key="mp", UploadId=up, PartNumber=n, Body=b)["ETag"]}
             for n, b in ((1, p1), (2, p2))]
    s3.complete_multipart_upload(Bucket="live", Key="mp", UploadId=up, MultipartUpload={"Parts": parts})
    s3.put_object(Bucket="live", Key="small", Body=b"small")
    s3.put_object(Bucket="live", Key="gone", Body=b"gone")
    s3.delete_object(Bucket="live", Key="gone")
    open_up = s3.create_multipart_upload(Bucket="live", Key="open")["UploadId"]
    s3.upload_part(Bucket="live", Key="open", UploadId=open_up, PartNumber=1, Body=pending)
    print(json.dumps({"first": first, "upload": open_up}))
else:
    state = json.loads(sys.argv[2])
    assert s3.get_object(Bucket="live", Key="big")["Body"].read() == big2, "the latest 9 MiB version"
    assert s3.get_object(Bucket="live", Key="big", VersionId=state["first"])["Body"].read() == big1, "the archived one"
    assert s3.get_object(Bucket="live", Key="mp")["Body"].read() == p1 + p2, "the multipart object"
    assert s3.get_object(Bucket="live", Key="small")["Body"].read() == b"small"
    parts = s3.list_parts(Bucket="live", Key="open", UploadId=state["upload"])["Parts"]
    assert [p["Size"] for p in parts] == [5 * MiB], parts
    done = s3.complete_multipart_upload(Bucket="live", Key="open", UploadId=state["upload"],
                                        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": parts[0]["ETag"]}]})
    assert s3.get_object(Bucket="live", Key="open")["Body"].read() == pending, "the upload's part survived"
    print("live data whole")
