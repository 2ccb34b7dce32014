"""A local mirror of a remote model repository, shared by the S3 and fsspec (GCS, Azure) sources.

A store lists its objects (`RemoteObject`: key, size and a fingerprint such as the ETag that changes whenever the
content does) and fetches one into an open file; `Mirror.update` does the rest:

- objects whose fingerprint and size match the manifest (and whose local file still has that size) are left
  alone, so their mtimes do not change and the registry does not see them as modified;
- changed and new objects are downloaded into a staging directory inside the mirror root (the same file system,
  so the final `os.replace` is atomic), verified, and moved into place only once every download has succeeded:
  a sync that fails half-way leaves the previous mirror exactly as it was;
- files this mirror downloaded earlier whose objects disappeared are deleted. Files it did not download (a
  pre-filled `TRITON_*_MOUNT_DIRECTORY`) are never deleted.

The manifest `MANIFEST_NAME` and the staging directory `STAGING_NAME` live at the mirror root under hidden names;
the registry only takes non-hidden directories at the root as models, so neither is mistaken for a model.
"""

from __future__ import annotations

import abc
import json
import logging
import os
import shutil
import stat
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Protocol

from modelhost.repository.errors import RepositoryError

logger = logging.getLogger("modelhost.repository")

MANIFEST_NAME = ".modelhost-manifest.json"
STAGING_NAME = ".modelhost-staging"
_RESERVED = frozenset({MANIFEST_NAME, MANIFEST_NAME + ".tmp", STAGING_NAME})
_MANIFEST_FORMAT = 1
_UNTRUSTED = "\0untrusted"  # a fingerprint no store produces: never "unchanged"

# Mirror directories in use in this process, by resolved path.
_roots_lock = threading.Lock()
_root_owners: weakref.WeakValueDictionary[Path, Mirror] = weakref.WeakValueDictionary()
_root_locks: dict[Path, threading.Lock] = {}

# Files at least this large log their download progress every 10%. Tests make it smaller.
LARGE_FILE_BYTES = 64 * 1024 * 1024
# Read size when streaming an object into its file.
CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True)
class RemoteObject:
    key: str  # the store's own name for the object, for fetching and messages
    size: int
    fingerprint: str  # ETag or equivalent: differs whenever the content differs


# Writes one object into `out` and describes what it wrote (the store may have changed since it was listed).
Fetch = Callable[[RemoteObject, BinaryIO], RemoteObject]


class Digest(Protocol):
    def update(self, data: bytes, /) -> None: ...


@dataclass
class SyncResult:
    downloaded: int = 0
    downloaded_bytes: int = 0
    deleted: int = 0
    unchanged: int = 0


def safe_relative_path(name: str) -> bool:
    """True when `name` (an object key relative to the repository prefix) stays inside the mirror."""
    if not name or name.startswith("/") or "\\" in name or "\0" in name:
        return False
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return False
    return parts[0] not in _RESERVED


def directory_names(names: Iterable[str]) -> set[str]:
    """The names that are also a directory of another name ("a" when "a/b" exists).

    A local file system cannot hold both a file and a directory of one name; the directory wins, as it would
    for a repository copied from the store with other tools.
    """
    names = set(names)
    return {str(parent) for name in names for parent in PurePosixPath(name).parents} & names


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


class _Progress:
    """Logs every 10% of a large download, so a multi-GB model does not look like a hung server."""

    def __init__(self, label: str, total: int) -> None:
        self.label = label
        self.total = total
        self.enabled = total >= LARGE_FILE_BYTES and total > 0
        self.next_percent = 10
        if self.enabled:
            logger.info("downloading %s (%s)", label, human_size(total))

    def advance(self, done: int) -> None:
        if not self.enabled:
            return
        percent = min(done * 100 // self.total, 100)
        if percent >= self.next_percent:
            step = percent - percent % 10
            logger.info(
                "downloading %s: %d%% (%s of %s)", self.label, step, human_size(done), human_size(self.total)
            )
            self.next_percent = step + 10


def copy_stream(chunks: Iterable[bytes], out: BinaryIO, label: str, total: int, digest: Digest | None) -> int:
    """Writes the chunks to `out`, feeding `digest` and logging progress; returns the number of bytes written."""
    progress = _Progress(label, total)
    done = 0
    for chunk in chunks:
        out.write(chunk)
        if digest is not None:
            digest.update(chunk)
        done += len(chunk)
        progress.advance(done)
    return done


class Mirror:
    """The local copy of one remote repository, rooted at `root`."""

    def __init__(self, url: str, root: Path) -> None:
        self.url = url
        self.root = root
        self._warned: set[str] = set()
        self._synced = False

    def update(self, listing: Mapping[str, RemoteObject], fetch: Fetch) -> SyncResult:
        """Make the mirror match `listing` (name relative to the repository -> object).

        Raises RepositoryError and leaves the mirror as it was when an object cannot be fetched.
        """
        remote = self._mirrorable(listing)
        with self._claim():
            result = self._update(remote, fetch)
        # INFO for the first sync and for changes; a poll that finds nothing new (every 15 s by default, for
        # days) would otherwise flood the log.
        quiet = self._synced and not (result.downloaded or result.deleted)
        logger.log(
            logging.DEBUG if quiet else logging.INFO,
            "model repository '%s' synced to %s: %d downloaded (%s), %d deleted, %d unchanged",
            self.url,
            self.root,
            result.downloaded,
            human_size(result.downloaded_bytes),
            result.deleted,
            result.unchanged,
        )
        self._synced = True
        return result

    def _claim(self) -> threading.Lock:
        """The lock of this mirror's directory, which no other repository of this process may use.

        Two repositories in one directory would each take the other's files for deleted objects; two objects
        for the same repository would clear each other's staging directory.
        """
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            key = self.root.resolve()
        except OSError as e:
            raise RepositoryError(f"model repository '{self.url}': cannot create the local copy: {e}") from e
        with _roots_lock:
            owner = _root_owners.setdefault(key, self)
            lock = _root_locks.setdefault(key, threading.Lock())
        if owner is not self and owner.url != self.url:
            raise RepositoryError(
                f"model repository '{self.url}': {self.root} already holds the copy of '{owner.url}'; "
                "give each remote repository its own empty directory"
            )
        return lock

    def _update(self, remote: Mapping[str, RemoteObject], fetch: Fetch) -> SyncResult:
        manifest = self._load_manifest()
        result = SyncResult()
        changed = []
        for name, obj in sorted(remote.items()):
            if self._is_current(name, obj, manifest):
                result.unchanged += 1
            else:
                changed.append(name)
        vanished = sorted(set(manifest) - set(remote))
        if not changed and not vanished:
            return result
        staging = self.root / STAGING_NAME
        shutil.rmtree(staging, ignore_errors=True)  # left over from a process killed mid-sync
        try:
            staged = self._download_all([remote[name] for name in changed], changed, fetch, staging)
            self._commit(staged, vanished, manifest, result)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return result

    def _mirrorable(self, listing: Mapping[str, RemoteObject]) -> dict[str, RemoteObject]:
        """The objects that can be mirrored; the others are skipped with one warning each per process."""
        shadowed = directory_names(listing)
        remote = {}
        for name, obj in listing.items():
            if not safe_relative_path(name):
                self._warn_once(obj.key, "its name would leave the model repository directory")
            elif name in shadowed:
                self._warn_once(obj.key, "a directory of the same name exists")
            else:
                remote[name] = obj
        return remote

    def _warn_once(self, key: str, reason: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning("model repository '%s': skipping object '%s': %s", self.url, key, reason)

    def _is_current(self, name: str, obj: RemoteObject, manifest: Mapping[str, RemoteObject]) -> bool:
        known = manifest.get(name)
        if known is None or known.fingerprint != obj.fingerprint or known.size != obj.size:
            return False
        try:
            local = (self.root / name).stat()
        except OSError:
            return False
        # A local file edited or truncated by hand is fetched again.
        return stat.S_ISREG(local.st_mode) and local.st_size == obj.size

    def _download_all(
        self, objects: list[RemoteObject], names: list[str], fetch: Fetch, staging: Path
    ) -> list[tuple[str, Path, RemoteObject]]:
        if not objects:
            return []
        try:
            staging.mkdir()
        except OSError as e:
            raise RepositoryError(f"model repository '{self.url}': cannot write the local copy: {e}") from e
        staged = []
        for index, (name, obj) in enumerate(zip(names, objects, strict=True)):
            path = staging / str(index)  # flat, numbered: the key's own name may be long or deep
            staged.append((name, path, self._download(obj, fetch, path)))
        return staged

    def _download(self, obj: RemoteObject, fetch: Fetch, path: Path) -> RemoteObject:
        try:
            with open(path, "wb") as out:
                fetched = fetch(obj, out)
                out.flush()
                written = os.fstat(out.fileno()).st_size
        except OSError as e:
            raise RepositoryError(f"model repository '{self.url}': cannot write the local copy: {e}") from e
        if written != fetched.size:
            raise RepositoryError(
                f"model repository '{self.url}': download of '{obj.key}' is incomplete "
                f"({written} of {fetched.size} bytes)"
            )
        return fetched

    def _commit(
        self,
        staged: list[tuple[str, Path, RemoteObject]],
        vanished: list[str],
        manifest: dict[str, RemoteObject],
        result: SyncResult,
    ) -> None:
        # Deletions first: an object "m/1" replaced by "m/1/model.onnx" needs the file gone before the directory.
        try:
            for name in vanished:
                self._delete(name)
                del manifest[name]
                result.deleted += 1
            for name, path, fetched in staged:
                target = self.root / name
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, target)
                manifest[name] = fetched
                result.downloaded += 1
                result.downloaded_bytes += fetched.size
        except OSError as e:
            raise RepositoryError(f"model repository '{self.url}': cannot update the local copy: {e}") from e
        finally:
            # Whatever was committed is recorded, so the next sync neither repeats it nor forgets a file.
            self._save_manifest(manifest)

    def _delete(self, name: str) -> None:
        target = self.root / name
        if target.is_file() or target.is_symlink():
            target.unlink()
        # Remove the directories the file leaves empty (a deleted version or model), up to the root.
        parent = target.parent
        while parent != self.root and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent

    def _load_manifest(self) -> dict[str, RemoteObject]:
        path = self.root / MANIFEST_NAME
        try:
            data = json.loads(path.read_text())
            if data.get("format") != _MANIFEST_FORMAT:
                raise ValueError(f"unknown format {data.get('format')!r}")
            # Left by an earlier run with another URL (the user pointed the same directory elsewhere): its files
            # are still ours to delete, but its fingerprints come from another store and prove nothing here.
            trusted = data.get("url") == self.url
            return {
                name: RemoteObject(
                    str(entry["key"]),
                    int(entry["size"]),
                    str(entry["fingerprint"]) if trusted else _UNTRUSTED,
                )
                for name, entry in data["objects"].items()
                if safe_relative_path(
                    name
                )  # a hand-edited manifest must not make us delete outside the mirror
            }
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            # Everything is fetched again; nothing is lost but time.
            logger.warning("ignoring the unreadable mirror manifest %s: %s", path, e)
            return {}

    def _save_manifest(self, manifest: Mapping[str, RemoteObject]) -> None:
        data = {
            "format": _MANIFEST_FORMAT,
            "url": self.url,
            "objects": {
                name: {"key": obj.key, "size": obj.size, "fingerprint": obj.fingerprint}
                for name, obj in sorted(manifest.items())
            },
        }
        path = self.root / MANIFEST_NAME
        temporary = self.root / (MANIFEST_NAME + ".tmp")
        try:
            temporary.write_text(json.dumps(data, indent=1))
            os.replace(temporary, path)
        except OSError as e:
            raise RepositoryError(f"model repository '{self.url}': cannot write {path}: {e}") from e


class MirroredRepository(abc.ABC):
    """A remote repository (a RepositorySource) whose `sync()` mirrors it locally; a store lists and fetches.

    The mirror lives in the directory named by the store's mount variable when set (the user's: never removed),
    else in a private temporary directory removed with this object.
    """

    def __init__(self, url: str, mount_env: str, temp_prefix: str) -> None:
        self.url = url
        self._mount_env = mount_env
        self._temp_prefix = temp_prefix
        self._mirror: Mirror | None = None
        self._lock = threading.Lock()  # one sync at a time, and one lazy client and mirror

    def sync(self) -> Path:
        with self._lock:
            local = self._local_mirror()
            local.update(self._list(), self._fetch)
            return local.root

    def _local_mirror(self) -> Mirror:
        if self._mirror is None:
            configured = os.environ.get(self._mount_env)
            if configured:
                root = Path(configured).expanduser()
            else:
                root = Path(tempfile.mkdtemp(prefix=self._temp_prefix))
                weakref.finalize(self, shutil.rmtree, root, ignore_errors=True)
            self._mirror = Mirror(self.url, root)
        return self._mirror

    @abc.abstractmethod
    def _list(self) -> dict[str, RemoteObject]:
        """The repository's objects, by name relative to the repository root."""

    @abc.abstractmethod
    def _fetch(self, obj: RemoteObject, out: BinaryIO) -> RemoteObject:
        """Write one object into `out`; describe what was written."""
