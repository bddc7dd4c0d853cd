"""Two gateways on one cluster: a gateway keeps a bucket's record for up
to 2 s, but a write that finds a version made by a versioned write (the
bucket's versioning turned on through the other gateway meanwhile) makes
a version too, instead of replacing it unseen.

Env: S3_ENDPOINT, S3_ENDPOINT2, S3_KEY, S3_SECRET.
"""
import os

import boto3
from botocore.config import Config


def client(endpoint):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=os.environ["S3_KEY"],
        aws_secret_access_key=os.environ["S3_SECRET"],
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


a = client(os.environ["S3_ENDPOINT"])
b = client(os.environ["S3_ENDPOINT2"])
a.create_bucket(Bucket="shared")
b.put_object(Bucket="shared", Key="k", Body=b"before")  # b keeps the record: unversioned
a.put_bucket_versioning(Bucket="shared", VersioningConfiguration={"Status": "Enabled"})
v1 = a.put_object(Bucket="shared", Key="k", Body=b"v1")["VersionId"]
b.put_object(Bucket="shared", Key="k", Body=b"v2")  # within 2 s of b's read
versions = a.list_object_versions(Bucket="shared")["Versions"]
bodies = {
    v["VersionId"]: a.get_object(Bucket="shared", Key="k", VersionId=v["VersionId"])["Body"].read()
    for v in versions
}
assert len(versions) == 3, versions
assert bodies["null"] == b"before" and bodies[v1] == b"v1", bodies
latest = [v for v in versions if v["IsLatest"]]
assert len(latest) == 1 and bodies[latest[0]["VersionId"]] == b"v2", versions
assert latest[0]["VersionId"] not in ("null", v1), versions
for v in versions:
    a.delete_object(Bucket="shared", Key="k", VersionId=v["VersionId"])
a.delete_bucket(Bucket="shared")
print("two gateways agree")
