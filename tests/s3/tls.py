"""HTTPS to a gateway with a self-signed certificate: boto3 checks it
(verify=the certificate), PUTs and GETs a 6 MiB object; a plain-HTTP
request to the same port is not answered as HTTP.

Env: E (https endpoint), K, S (keys), C (the certificate file)."""
import os
import urllib.request

import boto3
from botocore.config import Config

s3 = boto3.client("s3", endpoint_url=os.environ["E"], aws_access_key_id=os.environ["K"],
                  aws_secret_access_key=os.environ["S"], region_name="us-east-1", verify=os.environ["C"],
                  config=Config(s3={"addressing_style": "path"}))
s3.create_bucket(Bucket="secure")
body = os.urandom(6 << 20)
s3.put_object(Bucket="secure", Key="k", Body=body)
assert s3.get_object(Bucket="secure", Key="k")["Body"].read() == body, "the object over HTTPS"
plain = os.environ["E"].replace("https://", "http://") + "/secure/k"
try:
    urllib.request.urlopen(plain, timeout=10)
    answered = True
except Exception as e:  # the TLS server drops a request that is not TLS
    print("plain HTTP refused:", type(e).__name__)
    answered = False
assert not answered, "plain HTTP was answered"
s3.delete_object(Bucket="secure", Key="k")
s3.delete_bucket(Bucket="secure")
print("https ok")
