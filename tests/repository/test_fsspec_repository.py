"""gs:// and as:// repositories: the missing-extra message, and the mirroring through a fake fsspec filesystem."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import re
from pathlib import Path
from typing import Any

import pytest

from modelhost.repository.fsspec_store import FsspecRepository
from modelhost.repository.sources import RepositoryError, open_repository


@pytest.mark.parametrize(
    ("url", "package", "extra"),
    [("gs://bucket/models", "gcsfs", "gcs"), ("as://account/container/models", "adlfs", "azure")],
)
def test_missing_extra_is_named(url: str, package: str, extra: str) -> None:
    if importlib.util.find_spec("fsspec") and importlib.util.find_spec(package):
        pytest.skip(f"fsspec and {package} are installed")
    scheme = url.split("://")[0]
    message = f"{scheme}:// repositories need the '{extra}' extra: pip install 'modelhost[{extra}]'"
    with pytest.raises(RepositoryError, match=re.escape(message)):
        open_repository(url)


class FakeFileSystem:
    """The two fsspec calls the repository makes, over a dict of path -> content."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.opened: list[str] = []

    def find(self, path: str, detail: bool, withdirs: bool) -> dict[str, dict[str, Any]]:
        assert detail and not withdirs
        return {
            name: {"name": name, "type": "file", "size": len(data), "etag": hashlib.md5(data).hexdigest()}
            for name, data in self.files.items()
            if name.startswith(path.rstrip("/") + "/")
        }

    def open(self, path: str, mode: str) -> io.BytesIO:
        self.opened.append(path)
        return io.BytesIO(self.files[path])


class FakeFsspec:
    def __init__(self) -> None:
        self.fs = FakeFileSystem()
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def filesystem(self, protocol: str, **options: Any) -> FakeFileSystem:
        self.calls.append((protocol, options))
        return self.fs


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeFsspec:
    fake = FakeFsspec()
    monkeypatch.setattr(FsspecRepository, "_import", lambda self: fake)
    return fake


def test_gcs_repository_is_mirrored(
    fake: FakeFsspec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITON_GCS_MOUNT_DIRECTORY", str(tmp_path / "mirror"))
    fake.fs.files = {
        "bucket/models/simple/config.pbtxt": b"config",
        "bucket/models/simple/1/model.onnx": b"weights",
        "bucket/other/x/1/model.onnx": b"not in the repository",
    }
    repository = open_repository("gs://bucket/models/")
    root = repository.sync()
    assert root == tmp_path / "mirror"
    assert (root / "simple/config.pbtxt").read_bytes() == b"config"
    assert (root / "simple/1/model.onnx").read_bytes() == b"weights"
    assert not (root / "x").exists()
    assert fake.calls == [("gcs", {})]
    # Unchanged objects are not fetched again; a changed one is.
    fake.fs.opened.clear()
    fake.fs.files["bucket/models/simple/1/model.onnx"] = b"new weights"
    repository.sync()
    assert fake.fs.opened == ["bucket/models/simple/1/model.onnx"]
    assert (root / "simple/1/model.onnx").read_bytes() == b"new weights"


def test_azure_account_and_key(fake: FakeFsspec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_AZURE_MOUNT_DIRECTORY", str(tmp_path / "mirror"))
    monkeypatch.setenv("AZURE_STORAGE_KEY", "secret")
    fake.fs.files = {"container/path/m/1/model.onnx": b"weights"}
    root = open_repository("as://account/container/path").sync()
    assert (root / "m/1/model.onnx").read_bytes() == b"weights"
    assert fake.calls == [("abfs", {"account_name": "account", "account_key": "secret"})]


@pytest.mark.parametrize("url", ["gs://", "as://account", "as://account/"])
def test_incomplete_urls(fake: FakeFsspec, url: str) -> None:
    with pytest.raises(RepositoryError, match="incomplete URL"):
        open_repository(url)


def test_empty_repository_does_not_exist(
    fake: FakeFsspec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITON_GCS_MOUNT_DIRECTORY", str(tmp_path / "mirror"))
    with pytest.raises(RepositoryError, match="the repository does not exist"):
        open_repository("gs://bucket/typo").sync()
