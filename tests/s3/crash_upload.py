"""Stages what a SIGKILLed gateway leaves: a small object stored, a
multipart upload in progress, and a 64 MiB PUT of which 20 MiB have been
sent (the gateway has written some of its pieces). Prints SENT, then
waits for the test to kill the gateway; then, with a new gateway, checks
that nothing of the cut PUT is visible (phase "check")."""
import http.client
import os
import sys
import time
import urllib.parse

import boto3
from botocore.config import Config

MiB = 1 << 20
s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"], aws_access_key_id=os.environ["S3_KEY"],
                  aws_secret_access_key=os.environ["S3_SECRET"], region_name="us-east-1",
                  config=Config(retries={"max_attempts": 1}))


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


if sys.argv[1] == "stage":
    s3.create_bucket(Bucket="crash")
    s3.put_object(Bucket="crash", Key="kept", Body=b"kept")
    upload = s3.create_multipart_upload(Bucket="crash", Key="in-progress")["UploadId"]
    s3.upload_part(Bucket="crash", Key="in-progress", UploadId=upload, PartNumber=1, Body=os.urandom(5 * MiB))
    url = urllib.parse.urlsplit(s3.generate_presigned_url(
        "put_object", Params={"Bucket": "crash", "Key": "cut"}, ExpiresIn=600))
    conn = http.client.HTTPConnection(url.hostname, url.port)
    conn.putrequest("PUT", url.path + "?" + url.query)
    conn.putheader("Content-Length", str(64 * MiB))
    conn.endheaders()
    chunk = os.urandom(MiB)
    for _ in range(20):
        conn.send(chunk)
    time.sleep(2)  # the gateway writes the pieces it has
    print("SENT", flush=True)
    time.sleep(120)  # killed with the gateway's connection, or by the test
else:
    code = None
    try:
        s3.head_object(Bucket="crash", Key="cut")
    except s3.exceptions.ClientError as e:
        code = e.response["Error"]["Code"]
    check(code in ("404", "NoSuchKey", "NotFound"), f"the cut PUT is visible: {code}")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="crash").get("Contents", [])]
    check(keys == ["kept"], f"listing {keys}")
    check(s3.get_object(Bucket="crash", Key="kept")["Body"].read() == b"kept", "the stored object")
    uploads = s3.list_multipart_uploads(Bucket="crash").get("Uploads", [])
    check([u["Key"] for u in uploads] == ["in-progress"], f"uploads {uploads}")
    print("checked", flush=True)
