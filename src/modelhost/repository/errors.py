"""The error of a repository that cannot be read, shared by every kind of store."""

from __future__ import annotations


class RepositoryError(Exception):
    """A repository that cannot be read: a bad URL, missing credentials, an unreachable store, no such bucket."""
