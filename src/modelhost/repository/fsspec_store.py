"""Google Cloud Storage (`gs://bucket/path`) and Azure Blob Storage (`as://account/container/path`) repositories.

Both go through fsspec (gcsfs, adlfs), installed with the 'gcs' and 'azure' extras; without them the repository
is refused with the pip command to run. Credentials as in Triton: GCS from GOOGLE_APPLICATION_CREDENTIALS, then
the attached service account, then anonymous (gcsfs's default chain); Azure from AZURE_STORAGE_KEY for the account
in the URL, or DefaultAzureCredential (managed identity, AZURE_CLIENT_ID, ...) when AZURE_STORAGE_AUTH_TYPE is
`managed_identity` or `default`, else anonymous. The local copy lives in $TRITON_GCS_MOUNT_DIRECTORY /
$TRITON_AZURE_MOUNT_DIRECTORY when set, else in a private temporary directory removed at exit.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any, BinaryIO

from modelhost.repository import mirror
from modelhost.repository.errors import RepositoryError
from modelhost.repository.mirror import MirroredRepository, RemoteObject


@dataclass(frozen=True)
class _Store:
    package: str  # the fsspec implementation to import
    extra: str  # modelhost's pip extra that installs it
    protocol: str  # fsspec's protocol name
    mount_env: str  # Triton's variable for the local copy
    url_form: str


_STORES = {
    "gs": _Store("gcsfs", "gcs", "gcs", "TRITON_GCS_MOUNT_DIRECTORY", "gs://bucket/path"),
    "as": _Store("adlfs", "azure", "abfs", "TRITON_AZURE_MOUNT_DIRECTORY", "as://account/container/path"),
}

# Metadata that changes with the content, best first: a content hash or version beats a timestamp.
_FINGERPRINT_KEYS = ("etag", "md5Hash", "generation", "content_md5", "last_modified", "updated", "mtime")


def _fingerprint(info: dict[str, Any]) -> str:
    for key in _FINGERPRINT_KEYS:
        value = info.get(key)
        if value:
            return f"{key}:{value}"
    return ""  # size alone decides then


class FsspecRepository(MirroredRepository):
    """A gs:// or as:// repository, mirrored locally by `sync()`."""

    def __init__(self, url: str) -> None:
        scheme, _, rest = url.partition("://")
        self.scheme = scheme.lower()
        if self.scheme not in _STORES:
            raise RepositoryError(f"model repository '{url}': not a gs:// or as:// URL")
        self.store = _STORES[self.scheme]
        super().__init__(url, self.store.mount_env, f"modelhost-{self.scheme}-")
        self._fsspec = self._import()
        parts = [part for part in rest.split("/") if part]
        self.account = ""
        if self.scheme == "as":
            self.account, parts = (parts[0], parts[1:]) if parts else ("", [])
        if not parts:
            raise RepositoryError(
                f"model repository '{url}': incomplete URL (expected {self.store.url_form})"
            )
        # "bucket/path" (GCS) or "container/path" (Azure), as fsspec names it.
        self.root_path = "/".join(parts)
        self._fs: Any = None

    def _import(self) -> Any:
        try:
            fsspec = importlib.import_module("fsspec")
            importlib.import_module(self.store.package)
        except ImportError as e:
            raise RepositoryError(
                f"model repository '{self.url}': {self.scheme}:// repositories need the '{self.store.extra}' "
                f"extra: pip install 'modelhost[{self.store.extra}]'"
            ) from e
        return fsspec

    def _filesystem(self) -> Any:
        if self._fs is None:
            options: dict[str, Any] = {}
            if self.scheme == "as":
                options["account_name"] = self.account
                key = os.environ.get("AZURE_STORAGE_KEY")
                if key:
                    options["account_key"] = key
                elif os.environ.get("AZURE_STORAGE_AUTH_TYPE", "").lower() in ("managed_identity", "default"):
                    options["anon"] = False  # adlfs then uses DefaultAzureCredential
            self._fs = self._fsspec.filesystem(self.store.protocol, **options)
        return self._fs

    def _list(self) -> dict[str, RemoteObject]:
        try:
            found = self._filesystem().find(self.root_path, detail=True, withdirs=False)
        # The backends raise their own exception trees (auth libraries, aiohttp, azure-core) as well as OSError;
        # whatever it is, the store cannot be read now and the previous copy must keep serving.
        except Exception as e:
            raise RepositoryError(f"model repository '{self.url}': cannot read the repository: {e}") from e
        if not found:
            raise RepositoryError(
                f"model repository '{self.url}': no objects found: the repository does not exist"
            )
        listing = {}
        for path, info in found.items():
            name = str(path).strip("/").removeprefix(self.root_path + "/")
            if name != str(path).strip("/") and info.get("type", "file") == "file":
                listing[name] = RemoteObject(str(path), int(info.get("size") or 0), _fingerprint(info))
        return listing

    def _fetch(self, obj: RemoteObject, out: BinaryIO) -> RemoteObject:
        label = f"{self.scheme}://{self.account + '/' if self.account else ''}{obj.key}"
        try:
            with self._filesystem().open(obj.key, "rb") as remote:
                chunks = iter(lambda: bytes(remote.read(mirror.CHUNK_BYTES)), b"")
                size = mirror.copy_stream(chunks, out, label, obj.size, None)
        except Exception as e:  # as in _list: any backend failure means "not now"
            raise RepositoryError(f"model repository '{self.url}': cannot read {label}: {e}") from e
        if size != obj.size:
            raise RepositoryError(
                f"model repository '{self.url}': {label} changed while reading ({size} bytes, listed {obj.size})"
            )
        return obj
