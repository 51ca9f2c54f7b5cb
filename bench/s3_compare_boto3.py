#!/usr/bin/python3
"""The same workload as s3_compare_bench.cpp with boto3 (Debian's python3-boto3), same server.
1 MiB: put_object / get_object().read(); 64 MiB: upload_file / download_file with boto3's
default TransferConfig (8 MiB parts, 10 threads). Usage: s3_compare_boto3.py BUCKET PREFIX SIZE_MIB COUNT SCRATCH"""
import json, os, random, sys, time

import boto3

bucket, prefix, mib, count, scratch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name=os.environ.get("AWS_REGION", "us-east-1"))
data = random.Random(1).randbytes(mib << 20)
via_files = mib >= 16
src, dst = os.path.join(scratch, "boto-src.bin"), os.path.join(scratch, "boto-dst.bin")
if via_files:
    with open(src, "wb") as f:
        f.write(data)
key = lambda i: f"{prefix}/bench/{mib}mib/{i}"
t0 = time.perf_counter()
for i in range(count):
    if via_files:
        s3.upload_file(src, bucket, key(i))
    else:
        s3.put_object(Bucket=bucket, Key=key(i), Body=data)
put_s = time.perf_counter() - t0
t0 = time.perf_counter()
for i in range(count):
    if via_files:
        s3.download_file(bucket, key(i), dst)
    else:
        assert len(s3.get_object(Bucket=bucket, Key=key(i))["Body"].read()) == len(data)
get_s = time.perf_counter() - t0
for i in range(count):
    s3.delete_object(Bucket=bucket, Key=key(i))
for p in (src, dst):
    if os.path.exists(p):
        os.remove(p)
print(json.dumps({"client": "boto3", "size_mib": mib, "count": count,
                  "put_mib_s": round(mib * count / put_s, 1), "get_mib_s": round(mib * count / get_s, 1)}))
