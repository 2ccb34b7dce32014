"""A local S3 for tests: moto's standalone server in a subprocess, and helpers to fill a bucket.

A subprocess keeps moto's own imports and warnings out of the test process (pytest runs with warnings as errors)
and is stopped for certain at the end. Its dummy credentials are set only in the test process and the server's
environment, never in the package.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import boto3

from e2e.server_process import free_ports

# Dummy credentials moto accepts; anything signed with them is accepted.
TEST_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    # Keep a developer's own ~/.aws and the EC2 metadata service out of the tests.
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}
# Variables that would bring in other credentials; removed wherever TEST_AWS_ENV is applied.
OTHER_AWS_ENV = (
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
)


def aws_test_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) with the dummy credentials and nothing else from AWS."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in OTHER_AWS_ENV}
    return {**env, **TEST_AWS_ENV}


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _wait_until_answering(
    process: subprocess.Popen[bytes], port: int, log: IO[bytes], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while not _answers(port):
        if process.poll() is not None:
            log.seek(0)
            output = log.read().decode(errors="replace")
            raise RuntimeError(f"moto server exited with {process.returncode}:\n{output}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"moto server did not answer on port {port} in {timeout} s")
        time.sleep(0.05)


@contextlib.contextmanager
def moto_server(timeout: float = 30) -> Iterator[str]:
    """Runs moto's S3 on a free local port and yields its endpoint URL (http://127.0.0.1:PORT)."""
    [port] = free_ports(1)
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    # moto logs every request: into a file, since a pipe nobody reads would fill up and stall the server.
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, env=aws_test_env(), stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_until_answering(process, port, log, timeout)
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def s3_client(endpoint: str) -> Any:
    """A boto3 client for the test server, with the dummy credentials given explicitly."""
    return boto3.session.Session(
        aws_access_key_id=TEST_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=TEST_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        region_name=TEST_AWS_ENV["AWS_DEFAULT_REGION"],
    ).client("s3", endpoint_url=endpoint)


def upload_directory(client: Any, local: Path, bucket: str, prefix: str = "") -> list[str]:
    """Uploads every file under `local` to s3://bucket/prefix/..., creating the bucket; returns the keys."""
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=bucket)
    keys = []
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        key = "/".join(part for part in (prefix.strip("/"), path.relative_to(local).as_posix()) if part)
        client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
        keys.append(key)
    return keys
