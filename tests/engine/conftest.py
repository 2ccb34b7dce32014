"""Fixtures shared by the engine's unit tests."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from cuda_stand_in import HostIpc


@pytest.fixture
def key() -> Iterator[str]:
    """A 64-byte shared-memory object, filled with 0..63."""
    name = f"mh_unit_{uuid.uuid4().hex[:10]}"
    path = f"/dev/shm/{name}"
    with open(path, "wb") as f:
        f.write(bytes(range(64)))
    yield "/" + name
    if os.path.exists(path):
        os.unlink(path)


@pytest.fixture
def ipc() -> HostIpc:
    """A stand-in for CUDA's IPC whose "device memory" is host memory."""
    return HostIpc()
