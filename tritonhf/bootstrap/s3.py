"""The server's repository in object storage (S3 and S3-compatible): its URL, a client, and a check.

One URL form for everything, the one Triton itself parses:

    s3://BUCKET/PREFIX                      AWS S3 (region from AWS_DEFAULT_REGION)
    s3://http://HOST:PORT/BUCKET/PREFIX     an S3-compatible endpoint (MinIO, moto ...), port mandatory

Credentials come from where boto3 and Triton both look: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN`` (and boto3's profiles). They are never
printed, logged or written anywhere by tritonhf.

Triton reports every S3 failure as "Unable to create S3 filesystem client. Check account
credentials" (a missing bucket too) and hangs on an unreachable endpoint, so ``check`` asks
S3 itself first and names the real cause; ``Server.start`` runs it before starting Triton.
Pushing and pulling repositories is ``deploy/storage.py``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from tritonhf.errors import StorageError

# Triton's own parser: a custom endpoint is only recognised in this shape (s3://http://HOST:PORT/BUCKET/PATH).
_ENDPOINT_URL = re.compile(
    r"^s3://(?P<scheme>https?)://(?P<host>[^/:]+):(?P<port>\d+)/(?P<bucket>[^/]+)/?(?P<path>.*)$"
)
_AWS_URL = re.compile(r"^s3://(?P<bucket>[^/]+)(?:/(?P<path>.*))?$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_SEGMENT = re.compile(r"^[0-9a-zA-Z._-]+$")


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # without leading or trailing slash; "" for the bucket's root
    endpoint: str | None = None  # "http://host:port" for an S3-compatible endpoint

    @classmethod
    def parse(cls, url: str) -> S3Location:
        """A location from either URL form; a clear error for anything Triton would misread."""
        match = _ENDPOINT_URL.match(url)
        endpoint = None
        if match:
            endpoint = f"{match['scheme']}://{match['host']}:{match['port']}"
        else:
            match = _AWS_URL.match(url)
            if not match or ":" in match["bucket"]:
                raise StorageError(
                    f"{url!r} is not an S3 repository URL. Use s3://BUCKET/PREFIX for AWS, or "
                    "s3://http://HOST:PORT/BUCKET/PREFIX for an S3-compatible endpoint (the port is required; "
                    "Triton sends anything else to AWS)."
                )
        bucket, path = match["bucket"], (match["path"] or "").strip("/")
        if not _BUCKET.match(bucket):
            raise StorageError(f"{bucket!r} is not a valid bucket name (lower case letters, digits, '.', '-').")
        bad = [segment for segment in path.split("/") if path and not _SEGMENT.match(segment)]
        if bad:
            raise StorageError(
                f"Path segment {bad[0]!r} of {url!r}: Triton accepts only letters, digits, '.', '_', '-'."
            )
        return cls(bucket, path, endpoint)

    @property
    def url(self) -> str:
        """The URL as Triton reads it (``--model-repository``)."""
        base = f"s3://{self.endpoint}/" if self.endpoint else "s3://"
        return base + "/".join(part for part in (self.bucket, self.prefix) if part)

    def key(self, relative: str) -> str:
        return f"{self.prefix}/{relative}" if self.prefix else relative


def client(location: S3Location) -> Any:
    """A boto3 S3 client for ``location``: short connect timeout, few retries (a wrong URL fails fast)."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:
        raise StorageError("Object storage needs boto3: pip install 'tritonhf[s3]'.") from exc
    config = Config(connect_timeout=3, read_timeout=60, retries={"max_attempts": 2})
    region = os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION") or "us-east-1"
    return boto3.client("s3", endpoint_url=location.endpoint, region_name=region, config=config)


def explain(exc: Exception, location: S3Location) -> StorageError:
    """A boto3/botocore failure as a cause a person can act on (credentials are never included)."""
    from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

    where = location.endpoint or "AWS S3"
    if isinstance(exc, NoCredentialsError):
        return StorageError(
            f"No credentials for {where}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or an AWS profile)."
        )
    if isinstance(exc, EndpointConnectionError):
        return StorageError(f"Nothing answers at {where}: check the host and port in the URL.")
    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in ("NoSuchBucket", "404"):
            return StorageError(f"Bucket {location.bucket!r} does not exist at {where}. Create it first.")
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403", "ExpiredToken"):
            return StorageError(
                f"{where} refused the credentials for bucket {location.bucket!r} ({code}): check "
                "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and the bucket's policy."
            )
        return StorageError(f"{where} answered {code or 'an error'} for bucket {location.bucket!r}.")
    return StorageError(f"Could not reach {where}: {type(exc).__name__}.")


def object_keys(s3: Any, location: S3Location, prefix: str) -> list[str]:
    """Every object key under ``prefix`` (all pages)."""
    found: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=location.bucket, Prefix=prefix):
        found.extend(item["Key"] for item in page.get("Contents", []))
    return found


def check(url: str) -> list[str]:
    """The models at ``url`` (folders holding a config.pbtxt); a ``StorageError`` naming the cause otherwise."""
    location = S3Location.parse(url)
    s3 = client(location)
    try:
        s3.head_bucket(Bucket=location.bucket)
        keys = object_keys(s3, location, location.key(""))
    except Exception as exc:
        raise explain(exc, location) from exc
    start = len(location.key(""))
    models = sorted({key[start:].split("/")[0] for key in keys if key.endswith("/config.pbtxt")})
    if not models:
        raise StorageError(
            f"{location.url} holds no model (no NAME/config.pbtxt under it). Push one with "
            f"`tritonhf gallery push REPOSITORY {location.url}`."
        )
    return models
