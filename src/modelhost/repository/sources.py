"""Where model repositories come from: a local directory, or an object store mirrored into a local cache.

The registry only ever reads local directories. A remote repository is a `RepositorySource` whose `sync()` brings
a local mirror up to date (at start, and at every poll in poll mode) and returns its root; the registry then scans
that root exactly as it scans a local repository.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from modelhost.repository.errors import RepositoryError


class RepositorySource(Protocol):
    # The repository as the user gave it (a path or a URL), for messages and the startup table.
    url: str

    def sync(self) -> Path:
        """Bring the local copy up to date and return its root directory.

        Blocking (runs on a worker thread). Raises RepositoryError when the repository cannot be read; the local
        copy is then left as it was, so loaded models keep serving and the next poll tries again.
        """
        ...


class LocalRepository:
    """A directory on this machine: nothing to copy."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.path = Path(url).expanduser()

    def sync(self) -> Path:
        if not self.path.is_dir():
            raise RepositoryError(
                f"failed to stat file {self.url}: the model repository directory does not exist"
            )
        return self.path.resolve()


def open_repository(url: str) -> RepositorySource:
    """The source for one `--model-repository` value."""
    if "://" not in url:
        return LocalRepository(url)
    scheme = url.split("://", 1)[0].lower()
    if scheme == "s3":
        from modelhost.repository.s3 import S3Repository

        return S3Repository(url)
    if scheme in ("gs", "as"):
        from modelhost.repository.fsspec_store import FsspecRepository

        return FsspecRepository(url)
    raise RepositoryError(
        f"model repository '{url}': unsupported scheme '{scheme}://' (use a local path, s3://, gs:// or as://)"
    )


__all__ = ["LocalRepository", "RepositoryError", "RepositorySource", "open_repository"]
