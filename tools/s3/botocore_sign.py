#!/usr/bin/python3
"""Expected S3 SigV4 values from an independent signer: Debian's python3-botocore.

Signs a few S3 requests offline (botocore.auth.S3SigV4Auth for header auth,
S3SigV4QueryAuth for presigned URLs) with the clock pinned, and writes every intermediate
string to tests/store/data/s3_sigv4_cases.json, which tests/store/sigv4_test.cpp compares
against our signer. Regenerate with:  /usr/bin/python3 tools/s3/botocore_sign.py
"""
import datetime
import hashlib
import json
import os
from urllib.parse import quote

import botocore
import botocore.auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


class _PinnedDatetime(datetime.datetime):
    pinned = None

    @classmethod
    def utcnow(cls):
        return cls.pinned


def sign(case):
    _PinnedDatetime.pinned = datetime.datetime.strptime(case["amz_date"], "%Y%m%dT%H%M%SZ")
    botocore.auth.datetime.datetime = _PinnedDatetime
    creds = Credentials(case["access_key"], case["secret_key"], case["session_token"] or None)
    url = case["scheme"] + "://" + case["host"] + quote(case["path"], safe="/~")
    req = AWSRequest(method=case["method"], url=url, headers=dict(case["headers"]),
                     data=case["body"].encode(), params=dict(case["query"]))
    if case["presign_expires"]:
        signer = botocore.auth.S3SigV4QueryAuth(creds, "s3", case["region"], expires=case["presign_expires"])
    else:
        signer = botocore.auth.S3SigV4Auth(creds, "s3", case["region"])
    seen = {}  # the strings as computed inside add_auth (before the signature is injected)
    creq_fn, sts_fn = signer.canonical_request, signer.string_to_sign
    signer.canonical_request = lambda r: seen.setdefault("creq", creq_fn(r))
    signer.string_to_sign = lambda r, c: seen.setdefault("sts", sts_fn(r, c))
    signer.add_auth(req)
    creq, sts = seen["creq"], seen["sts"]
    out = dict(case)
    out["expected_canonical_request"] = creq
    out["expected_string_to_sign"] = sts
    if case["presign_expires"]:
        out["expected_url"] = req.url
    else:
        out["expected_authorization"] = req.headers["Authorization"]
    return out


AK, SK = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
BASE = dict(scheme="https", region="us-east-1", access_key=AK, secret_key=SK, session_token="",
            body="", query=[], headers=[], presign_expires=0)
CASES = [
    # AWS's published GetObject example (S3 API reference, "Example: GET Object"); the
    # published signature is f0e8bdb8... and the test checks that too.
    dict(BASE, name="aws-get-object", method="GET", host="examplebucket.s3.amazonaws.com",
         path="/test.txt", headers=[["Range", "bytes=0-9"]], amz_date="20130524T000000Z"),
    dict(BASE, name="put-with-payload-hash", method="PUT", scheme="http", host="127.0.0.1:7480",
         path="/bucket/runs/r1/global/v00000001/manifest.json", amz_date="20240102T030405Z",
         region="eu-west-2", body='{"version": 1, "sha256": "abc"}\n',
         headers=[["Content-Type", "application/json"], ["If-None-Match", "*"],
                  ["Content-MD5", "ZXhhbXBsZS1tZDUtdmFsdWU="]]),
    dict(BASE, name="list-objects-v2", method="GET", scheme="http", host="127.0.0.1:7480",
         path="/bucket/", amz_date="20240102T030405Z",
         query=[["list-type", "2"], ["prefix", "runs/r 1/updates/"], ["start-after", "runs/r 1/updates/w=3"],
                ["max-keys", "2"], ["continuation-token", "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="]]),
    dict(BASE, name="key-with-special-characters", method="GET", host="mybucket.s3.eu-central-1.amazonaws.com",
         path="/dir/my key+(1)~!$&'*,;=@.txt", region="eu-central-1", amz_date="20240229T235959Z",
         session_token="FwoGZXIvYXdzEXAMPLE//////////wEaDEXAMPLETOKEN+/="),
    dict(BASE, name="presigned-get", method="GET", host="examplebucket.s3.amazonaws.com",
         path="/test.txt", amz_date="20130524T000000Z", presign_expires=86400),
    dict(BASE, name="presigned-get-session-token", method="GET", scheme="http", host="localhost:7480",
         path="/bucket/a b/c.bin", amz_date="20240102T030405Z", presign_expires=600,
         session_token="IQoJb3JpZ2luX2VjEXAMPLE+/="),
]

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    dest = os.path.join(here, "..", "..", "tests", "store", "data", "s3_sigv4_cases.json")
    doc = {"generator": "tools/s3/botocore_sign.py with python3-botocore " + botocore.__version__,
           "cases": [sign(c) for c in CASES]}
    with open(dest, "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote", os.path.normpath(dest))
