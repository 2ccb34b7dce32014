"""S3 model repositories (`s3://...`), mirrored into a local directory with boto3.

URL forms, as tritonserver accepts them (the prefix may be empty: the whole bucket is the repository):

    s3://bucket/prefix                       AWS; region and endpoint from the standard configuration
    s3://host:port/bucket/prefix             an S3-compatible store over http (MinIO, Ceph, moto)
    s3://http://host:port/bucket/prefix      the same, explicit
    s3://https://host[:port]/bucket/prefix   over https

Credentials come only from boto3's standard chain: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN,
AWS_DEFAULT_REGION, AWS_PROFILE and the config files, then container and instance roles. The local copy lives in
$TRITON_AWS_MOUNT_DIRECTORY when set (as in Triton), else in a private temporary directory removed at exit.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, BinaryIO

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
    ReadTimeoutError,
)

from modelhost.repository import mirror
from modelhost.repository.errors import RepositoryError
from modelhost.repository.mirror import MirroredRepository, RemoteObject

MOUNT_DIRECTORY_ENV = "TRITON_AWS_MOUNT_DIRECTORY"

# A dead or unreachable store must fail a poll in seconds, not block it for minutes with botocore's defaults
# (60 s connect and read timeouts, retried). Reads time out per socket read, so large objects are not limited.
_CLIENT_CONFIG = Config(
    connect_timeout=3,
    read_timeout=10,
    retries={"total_max_attempts": 2, "mode": "standard"},
)
# Custom endpoints (MinIO, moto, an IP address) seldom resolve bucket subdomains: address buckets by path there.
_CUSTOM_ENDPOINT_CONFIG = _CLIENT_CONFIG.merge(Config(s3={"addressing_style": "path"}))

_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-]+):[0-9]{1,5}")
_HOST_OPTIONAL_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-]+)(:[0-9]{1,5})?")
_MD5_HEX = re.compile(r"[0-9a-fA-F]{32}")

_URL_FORMS = "s3://bucket/path, s3://host:port/bucket/path or s3://https://host:port/bucket/path"
_CREDENTIAL_HINT = (
    "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials), "
    "or configure a profile or an instance role"
)


@dataclass(frozen=True)
class S3Location:
    endpoint_url: str | None  # None: AWS itself, as boto3 is configured
    bucket: str
    prefix: str  # without leading or trailing '/'; '' for the whole bucket

    def key_prefix(self) -> str:
        """The prefix of every key in the repository ("models/"), so "models" does not also match "models2/"."""
        return f"{self.prefix}/" if self.prefix else ""


def parse_s3_url(url: str) -> S3Location:
    """Splits an s3:// URL into endpoint, bucket and prefix, or raises RepositoryError."""
    scheme, separator, rest = url.partition("://")
    if not separator or scheme.lower() != "s3":
        raise RepositoryError(f"model repository '{url}': not an s3:// URL")
    endpoint_scheme = None
    for candidate in ("http", "https"):
        if rest.lower().startswith(f"{candidate}://"):
            endpoint_scheme, rest = candidate, rest[len(candidate) + 3 :]
    first, _, path = rest.partition("/")
    # A bucket name never holds ':', so "host:port" (or an explicit scheme) means the first part is an endpoint.
    if endpoint_scheme is not None or ":" in first:
        pattern = _HOST_OPTIONAL_PORT if endpoint_scheme is not None else _HOST_PORT
        if not pattern.fullmatch(first):
            raise RepositoryError(f"model repository '{url}': '{first}' is not a valid host:port endpoint")
        endpoint: str | None = f"{endpoint_scheme or 'http'}://{first}"
        bucket, _, prefix = path.partition("/")
    else:
        endpoint, bucket, prefix = None, first, path
    if not bucket:
        raise RepositoryError(f"model repository '{url}': no bucket name (expected {_URL_FORMS})")
    return S3Location(endpoint, bucket, prefix.strip("/"))


def _md5_checkable(etag: str, response: dict[str, Any]) -> bool:
    """Whether the ETag is the MD5 of the content.

    Not for multipart uploads ("<hash>-<parts>") nor for SSE-KMS and SSE-C objects, whose ETags are opaque.
    """
    if not _MD5_HEX.fullmatch(etag):
        return False
    encryption = str(response.get("ServerSideEncryption", ""))
    return not encryption.startswith("aws:kms") and "SSECustomerAlgorithm" not in response


class S3Repository(MirroredRepository):
    """An S3 (or S3-compatible) bucket prefix holding a model repository, mirrored locally by `sync()`."""

    def __init__(self, url: str) -> None:
        super().__init__(url, MOUNT_DIRECTORY_ENV, "modelhost-s3-")
        self.location = parse_s3_url(url)
        self._client: Any = None

    def _s3(self) -> Any:
        if self._client is None:
            config = _CLIENT_CONFIG if self.location.endpoint_url is None else _CUSTOM_ENDPOINT_CONFIG
            try:
                self._client = boto3.session.Session().client(
                    "s3", endpoint_url=self.location.endpoint_url, config=config
                )
            except BotoCoreError as e:  # a bad profile name, an unreadable config file
                raise self._error(e) from e
        return self._client

    def _list(self) -> dict[str, RemoteObject]:
        """Every object of the repository by its name relative to the prefix; directory markers left out."""
        key_prefix = self.location.key_prefix()
        listing: dict[str, RemoteObject] = {}
        seen_any = False
        try:
            paginator = self._s3().get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.location.bucket, Prefix=key_prefix):
                for item in page.get("Contents", []):
                    seen_any = True
                    key = str(item["Key"])
                    name = key[len(key_prefix) :]
                    if name and not name.endswith("/"):
                        listing[name] = RemoteObject(key, int(item["Size"]), str(item["ETag"]).strip('"'))
        except (BotoCoreError, ClientError) as e:
            raise self._error(e) from e
        if not seen_any:
            # As for a local path that does not exist: a typo in the prefix fails loudly instead of serving nothing.
            raise RepositoryError(
                f"model repository '{self.url}': no objects under s3://{self.location.bucket}/{key_prefix}: "
                "the repository does not exist"
            )
        return listing

    def _fetch(self, obj: RemoteObject, out: BinaryIO) -> RemoteObject:
        label = f"s3://{self.location.bucket}/{obj.key}"
        try:
            response = self._s3().get_object(Bucket=self.location.bucket, Key=obj.key)
            # Describe what was actually read: the object may have changed since it was listed.
            etag = str(response["ETag"]).strip('"')
            size = int(response["ContentLength"])
            digest = hashlib.md5(usedforsecurity=False) if _md5_checkable(etag, response) else None
            body = response["Body"]
            try:
                mirror.copy_stream(body.iter_chunks(mirror.CHUNK_BYTES), out, label, size, digest)
            finally:
                body.close()
        except (BotoCoreError, ClientError) as e:
            raise self._error(e, obj.key) from e
        if digest is not None and digest.hexdigest() != etag.lower():
            raise RepositoryError(
                f"model repository '{self.url}': {label} arrived corrupt "
                f"(MD5 {digest.hexdigest()}, ETag {etag})"
            )
        return RemoteObject(obj.key, size, etag)

    def _error(self, error: Exception, key: str | None = None) -> RepositoryError:
        """A message that says what to fix, from a botocore exception."""
        where = f"model repository '{self.url}'"
        bucket = self.location.bucket
        if isinstance(error, NoCredentialsError | PartialCredentialsError):
            return RepositoryError(f"{where}: no AWS credentials found: {_CREDENTIAL_HINT}")
        if isinstance(error, EndpointConnectionError | ConnectTimeoutError | ReadTimeoutError):
            endpoint = self.location.endpoint_url or "the S3 endpoint"
            return RepositoryError(f"{where}: cannot reach {endpoint}: {error}")
        if isinstance(error, ClientError):
            code = str(error.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchBucket", "404") and key is None:
                return RepositoryError(f"{where}: bucket '{bucket}' does not exist")
            if code == "NoSuchKey" and key is not None:
                return RepositoryError(
                    f"{where}: s3://{bucket}/{key} was deleted while the repository was being read"
                )
            if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"):
                return RepositoryError(
                    f"{where}: the AWS credentials were rejected ({code}): {_CREDENTIAL_HINT}"
                )
            if code in ("AccessDenied", "403"):
                return RepositoryError(f"{where}: access denied to bucket '{bucket}': {error}")
        return RepositoryError(f"{where}: cannot read the repository: {error}")
