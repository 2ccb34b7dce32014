"""S3 repositories against a real (local) S3: moto's server, one per module; one bucket per test."""

from __future__ import annotations

import gc
import logging
import os
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from e2e.server_process import free_ports
from modelhost.repository import mirror
from modelhost.repository.layout import model_directories
from modelhost.repository.s3 import S3Location, S3Repository, parse_s3_url
from modelhost.repository.sources import RepositoryError, open_repository
from s3_server import OTHER_AWS_ENV, TEST_AWS_ENV, moto_server, s3_client, upload_directory

PREFIX = "models/prod"


@pytest.fixture(scope="module", autouse=True)
def aws_env() -> Iterator[None]:
    """Dummy credentials for the whole module, and nothing from the developer's own AWS setup."""
    with pytest.MonkeyPatch.context() as patch:
        for name in OTHER_AWS_ENV:
            patch.delenv(name, raising=False)
        for name, value in TEST_AWS_ENV.items():
            patch.setenv(name, value)
        yield


@pytest.fixture(scope="module")
def endpoint(aws_env: None) -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture(scope="module")
def client(endpoint: str) -> Any:
    return s3_client(endpoint)


@pytest.fixture
def mount(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The mirror directory, through Triton's variable."""
    path = tmp_path / "mirror"
    monkeypatch.setenv("TRITON_AWS_MOUNT_DIRECTORY", str(path))
    return path


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A small repository: two models, one with two versions."""
    repo = tmp_path / "source"
    files = {
        "simple/config.pbtxt": b'platform: "onnxruntime_onnx"\n',
        "simple/1/model.onnx": os.urandom(3000),
        "simple/2/model.onnx": os.urandom(2000),
        "other/1/model.onnx": os.urandom(1000),
    }
    for name, data in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    return repo


@pytest.fixture
def bucket(client: Any, source: Path) -> str:
    """A fresh bucket holding `source` under PREFIX."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    upload_directory(client, source, name, PREFIX)
    return name


def repository_url(endpoint: str, bucket: str, prefix: str = PREFIX) -> str:
    host = endpoint.removeprefix("http://")
    return f"s3://{host}/{bucket}/{prefix}"


def tree(root: Path) -> dict[str, bytes]:
    """Every non-hidden file under root, by relative path."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.relative_to(root).as_posix().startswith(".")
    }


def mtimes(root: Path) -> dict[str, int]:
    return {name: (root / name).stat().st_mtime_ns for name in tree(root)}


def age(root: Path) -> None:
    """Moves every mirrored file's mtime an hour back, so a rewrite would show even on a coarse clock."""
    past = time.time() - 3600
    for name in tree(root):
        os.utime(root / name, (past, past))


def summary(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> str:
    lines = [r.getMessage() for r in caplog.records if "synced to" in r.getMessage() and r.levelno == level]
    assert lines, "no sync summary logged"
    return lines[-1]


# --- URLs ---


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://bucket/path/to/repo", S3Location(None, "bucket", "path/to/repo")),
        ("s3://bucket", S3Location(None, "bucket", "")),
        ("s3://bucket/", S3Location(None, "bucket", "")),
        ("s3://bucket/models/", S3Location(None, "bucket", "models")),
        ("S3://bucket/models", S3Location(None, "bucket", "models")),
        ("s3://127.0.0.1:9000/bucket/models", S3Location("http://127.0.0.1:9000", "bucket", "models")),
        ("s3://minio.local:9000/bucket", S3Location("http://minio.local:9000", "bucket", "")),
        ("s3://http://minio:9000/bucket/a/b", S3Location("http://minio:9000", "bucket", "a/b")),
        (
            "s3://https://s3.example.com:8443/bucket/m",
            S3Location("https://s3.example.com:8443", "bucket", "m"),
        ),
        ("s3://https://s3.example.com/bucket", S3Location("https://s3.example.com", "bucket", "")),
        ("s3://[::1]:9000/bucket/m", S3Location("http://[::1]:9000", "bucket", "m")),
    ],
)
def test_url_forms(url: str, expected: S3Location) -> None:
    assert parse_s3_url(url) == expected


@pytest.mark.parametrize(
    "url", ["s3://", "s3:///models", "s3://127.0.0.1:9000", "s3://127.0.0.1:9000/", "s3://https://host:443/"]
)
def test_url_without_bucket_is_refused(url: str) -> None:
    with pytest.raises(RepositoryError, match=r"no bucket name \(expected s3://bucket/path"):
        open_repository(url)


def test_url_with_bad_endpoint_is_refused() -> None:
    with pytest.raises(RepositoryError, match="'host:port' is not a valid host:port endpoint"):
        open_repository("s3://host:port/bucket/models")


def test_open_repository_needs_no_network() -> None:
    repository = open_repository("s3://bucket/models")
    assert isinstance(repository, S3Repository)
    assert repository.url == "s3://bucket/models"


# --- syncing ---


def test_first_sync_downloads_everything(
    endpoint: str, bucket: str, source: Path, mount: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="modelhost.repository"):
        root = S3Repository(repository_url(endpoint, bucket)).sync()
    assert "4 downloaded (5.9 KiB), 0 deleted, 0 unchanged" in summary(caplog)
    assert root == mount
    assert tree(root) == tree(source)
    assert (root / mirror.MANIFEST_NAME).is_file()
    assert not (root / mirror.STAGING_NAME).exists()
    # The hidden manifest is not a model.
    assert list(model_directories(root)) == ["other", "simple"]


def test_second_sync_downloads_nothing(
    endpoint: str, bucket: str, mount: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repository = S3Repository(repository_url(endpoint, bucket))
    root = repository.sync()
    age(root)
    before = mtimes(root)
    with caplog.at_level(logging.DEBUG, logger="modelhost.repository"):
        repository.sync()
    assert mtimes(root) == before
    # At DEBUG: a poll that changes nothing stays out of the INFO log.
    assert "0 downloaded (0 B), 0 deleted, 4 unchanged" in summary(caplog, logging.DEBUG)


def test_a_new_process_reuses_the_mirror(endpoint: str, bucket: str, mount: Path) -> None:
    """The manifest lives in the mirror: a restarted server with the same mount directory fetches nothing."""
    root = S3Repository(repository_url(endpoint, bucket)).sync()
    age(root)
    before = mtimes(root)
    S3Repository(repository_url(endpoint, bucket)).sync()
    assert mtimes(root) == before


def test_changed_object_is_downloaded_again(
    endpoint: str, bucket: str, client: Any, mount: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repository = S3Repository(repository_url(endpoint, bucket))
    root = repository.sync()
    age(root)
    before = mtimes(root)
    client.put_object(Bucket=bucket, Key=f"{PREFIX}/simple/2/model.onnx", Body=b"new weights")
    with caplog.at_level(logging.INFO, logger="modelhost.repository"):
        repository.sync()
    assert "1 downloaded (11 B), 0 deleted, 3 unchanged" in summary(caplog)
    assert (root / "simple/2/model.onnx").read_bytes() == b"new weights"
    after = mtimes(root)
    assert after.pop("simple/2/model.onnx") != before.pop("simple/2/model.onnx")
    assert after == before


def test_deleted_object_is_removed(
    endpoint: str, bucket: str, client: Any, mount: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repository = S3Repository(repository_url(endpoint, bucket))
    root = repository.sync()
    client.delete_object(Bucket=bucket, Key=f"{PREFIX}/other/1/model.onnx")
    client.delete_object(Bucket=bucket, Key=f"{PREFIX}/simple/2/model.onnx")
    with caplog.at_level(logging.INFO, logger="modelhost.repository"):
        repository.sync()
    assert "0 downloaded (0 B), 2 deleted, 2 unchanged" in summary(caplog)
    assert sorted(tree(root)) == ["simple/1/model.onnx", "simple/config.pbtxt"]
    # The directories left empty go too: a model or version deleted from the store is gone from the mirror.
    assert not (root / "other").exists()
    assert not (root / "simple" / "2").exists()


def test_new_object_appears(endpoint: str, bucket: str, client: Any, mount: Path) -> None:
    repository = S3Repository(repository_url(endpoint, bucket))
    root = repository.sync()
    client.put_object(Bucket=bucket, Key=f"{PREFIX}/third/1/model.onnx", Body=b"third")
    repository.sync()
    assert (root / "third/1/model.onnx").read_bytes() == b"third"
    assert list(model_directories(root)) == ["other", "simple", "third"]


def test_locally_damaged_file_is_fetched_again(endpoint: str, bucket: str, source: Path, mount: Path) -> None:
    repository = S3Repository(repository_url(endpoint, bucket))
    root = repository.sync()
    (root / "simple/1/model.onnx").write_bytes(b"truncated")
    (root / "other/1/model.onnx").unlink()
    repository.sync()
    assert tree(root) == tree(source)


def test_files_it_did_not_download_are_left_alone(endpoint: str, bucket: str, mount: Path) -> None:
    (mount / "local_model" / "1").mkdir(parents=True)
    (mount / "local_model" / "1" / "model.onnx").write_bytes(b"mine")
    S3Repository(repository_url(endpoint, bucket)).sync()
    assert (mount / "local_model" / "1" / "model.onnx").read_bytes() == b"mine"


def test_two_repositories_cannot_share_a_mirror(endpoint: str, bucket: str, client: Any, mount: Path) -> None:
    first = S3Repository(repository_url(endpoint, bucket))
    first.sync()
    second = S3Repository(repository_url(endpoint, bucket, "models"))
    with pytest.raises(RepositoryError, match=r"already holds the copy of 's3://.*/models/prod'; give each"):
        second.sync()
    assert first.sync() == mount


def test_mirror_left_by_another_url_is_taken_over(
    endpoint: str, bucket: str, client: Any, source: Path, mount: Path
) -> None:
    """A restart pointed at another prefix, same mount directory: the old copy goes, nothing stale is kept."""
    old = S3Repository(repository_url(endpoint, bucket))
    old.sync()
    del old
    gc.collect()
    upload_directory(client, source / "simple", bucket, "models/next/simple")
    root = S3Repository(repository_url(endpoint, bucket, "models/next")).sync()
    assert tree(root) == {f"simple/{name}": data for name, data in tree(source / "simple").items()}


def test_whole_bucket_as_repository(endpoint: str, client: Any, source: Path, mount: Path) -> None:
    name = f"test-{uuid.uuid4().hex[:12]}"
    upload_directory(client, source, name)
    root = S3Repository(repository_url(endpoint, name, prefix="")).sync()
    assert tree(root) == tree(source)


def test_prefix_matches_whole_path_components(endpoint: str, bucket: str, client: Any, mount: Path) -> None:
    """s3://bucket/models/prod does not take in models/prod2/..."""
    client.put_object(Bucket=bucket, Key=f"{PREFIX}2/intruder/1/model.onnx", Body=b"no")
    root = S3Repository(repository_url(endpoint, bucket)).sync()
    assert list(model_directories(root)) == ["other", "simple"]


def test_directory_markers_are_skipped(endpoint: str, bucket: str, client: Any, mount: Path) -> None:
    client.put_object(Bucket=bucket, Key=f"{PREFIX}/", Body=b"")
    client.put_object(Bucket=bucket, Key=f"{PREFIX}/simple/", Body=b"")
    client.put_object(Bucket=bucket, Key=f"{PREFIX}/empty/", Body=b"")
    root = S3Repository(repository_url(endpoint, bucket)).sync()
    assert list(model_directories(root)) == ["other", "simple"]
    assert (root / "simple").is_dir()


def test_multipart_object_is_downloaded(endpoint: str, bucket: str, client: Any, mount: Path) -> None:
    """A multipart ETag ("<hash>-<parts>") is not an MD5: the size alone is checked."""
    key = f"{PREFIX}/big/1/model.onnx"
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)
    part = client.upload_part(
        Bucket=bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=b"m" * 100
    )
    client.complete_multipart_upload(
        Bucket=bucket,
        Key=key,
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]},
    )
    assert "-" in client.head_object(Bucket=bucket, Key=key)["ETag"]
    root = S3Repository(repository_url(endpoint, bucket)).sync()
    assert (root / "big/1/model.onnx").read_bytes() == b"m" * 100


@pytest.mark.parametrize(
    "name",
    [
        "../evil",
        "a/../../evil",
        "simple/../../evil",
        "/abs/evil",
        "dot/./evil",
        "double//evil",
        ".modelhost-manifest.json",
    ],
)
def test_keys_that_would_escape_are_skipped(
    endpoint: str, bucket: str, client: Any, mount: Path, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    key = f"{PREFIX}/{name}"
    client.put_object(Bucket=bucket, Key=key, Body=b"evil")
    with caplog.at_level(logging.WARNING, logger="modelhost.repository"):
        root = S3Repository(repository_url(endpoint, bucket)).sync()
    assert f"skipping object '{key}'" in caplog.text
    assert sorted(tree(root)) == [
        "other/1/model.onnx",
        "simple/1/model.onnx",
        "simple/2/model.onnx",
        "simple/config.pbtxt",
    ]
    assert not list(mount.parent.rglob("evil"))


def test_file_shadowed_by_a_directory_is_skipped(
    endpoint: str, bucket: str, client: Any, mount: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """ "simple/1" as an object and as the directory of "simple/1/model.onnx": the directory wins."""
    client.put_object(Bucket=bucket, Key=f"{PREFIX}/simple/1", Body=b"shadow")
    with caplog.at_level(logging.WARNING, logger="modelhost.repository"):
        root = S3Repository(repository_url(endpoint, bucket)).sync()
    assert "a directory of the same name exists" in caplog.text
    assert (root / "simple/1/model.onnx").is_file()


def test_large_files_log_progress(
    endpoint: str,
    bucket: str,
    client: Any,
    mount: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(mirror, "LARGE_FILE_BYTES", 5000)
    monkeypatch.setattr(mirror, "CHUNK_BYTES", 1000)
    client.put_object(Bucket=bucket, Key=f"{PREFIX}/large/1/model.onnx", Body=os.urandom(10_000))
    with caplog.at_level(logging.INFO, logger="modelhost.repository"):
        S3Repository(repository_url(endpoint, bucket)).sync()
    progress = [r.getMessage() for r in caplog.records if "large/1/model.onnx" in r.getMessage()]
    assert progress[0].endswith("large/1/model.onnx (9.8 KiB)")
    assert [line.split(": ")[-1].split("%")[0] for line in progress[1:]] == [
        str(p) for p in range(10, 101, 10)
    ]
    # Small files stay quiet.
    assert not [r for r in caplog.records if "simple/1/model.onnx" in r.getMessage()]


def test_default_mirror_is_private_and_removed(
    endpoint: str, bucket: str, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRITON_AWS_MOUNT_DIRECTORY", raising=False)
    repository = S3Repository(repository_url(endpoint, bucket))
    root = repository.sync()
    assert root.name.startswith("modelhost-s3-")
    assert tree(root) == tree(source)
    del repository
    gc.collect()
    assert not root.exists()


# --- failures ---


def test_corrupt_download_leaves_the_mirror_untouched(
    endpoint: str, bucket: str, client: Any, source: Path, mount: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repository = S3Repository(repository_url(endpoint, bucket))
    root = repository.sync()
    age(root)
    before = mtimes(root)
    client.put_object(Bucket=bucket, Key=f"{PREFIX}/simple/2/model.onnx", Body=b"new weights")
    client.put_object(Bucket=bucket, Key=f"{PREFIX}/simple/1/model.onnx", Body=b"new weights too")
    copy_stream = mirror.copy_stream

    def flip_bits(chunks: Iterable[bytes], out: BinaryIO, label: str, total: int, digest: Any) -> int:
        return copy_stream((bytes(b ^ 0xFF for b in c) for c in chunks), out, label, total, digest)

    monkeypatch.setattr(mirror, "copy_stream", flip_bits)
    with pytest.raises(RepositoryError, match=r"simple/1/model\.onnx arrived corrupt"):
        repository.sync()
    assert tree(root) == tree(source)
    assert mtimes(root) == before
    assert not (root / mirror.STAGING_NAME).exists()
    # The next poll, with a sound transfer, catches up.
    monkeypatch.setattr(mirror, "copy_stream", copy_stream)
    repository.sync()
    assert (root / "simple/2/model.onnx").read_bytes() == b"new weights"


def test_nonexistent_bucket(endpoint: str, mount: Path) -> None:
    with pytest.raises(RepositoryError, match="bucket 'no-such-bucket' does not exist"):
        S3Repository(repository_url(endpoint, "no-such-bucket")).sync()


def test_nonexistent_prefix(endpoint: str, bucket: str, mount: Path) -> None:
    with pytest.raises(
        RepositoryError, match=r"no objects under s3://.*/models/typo/: the repository does not exist"
    ):
        S3Repository(repository_url(endpoint, bucket, "models/typo")).sync()


def test_missing_credentials(
    endpoint: str, bucket: str, mount: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(mount.parent / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(mount.parent / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(
        RepositoryError, match="no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
    ):
        S3Repository(repository_url(endpoint, bucket)).sync()


def test_unreachable_endpoint_fails_fast_and_keeps_the_mirror(
    endpoint: str, bucket: str, source: Path, mount: Path
) -> None:
    root = S3Repository(repository_url(endpoint, bucket)).sync()
    age(root)
    before = mtimes(root)
    dead = f"http://127.0.0.1:{free_ports(1)[0]}"  # nothing listens there
    with pytest.raises(RepositoryError, match=f"cannot reach {dead}"):
        S3Repository(repository_url(dead, bucket)).sync()
    assert tree(root) == tree(source)
    assert mtimes(root) == before
