"""Repository agents (`model_repository_agents` in a model's config), run on a model's files before it loads,
as Triton runs them on its LOAD action. modelhost has Triton's checksum agent built in: each parameter
`<algorithm>:<path relative to the model directory>` names a file and its expected digest, and a file whose digest
differs fails the model's load with Triton's message. As Triton's agent, MD5 is the one algorithm.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from modelhost.errors import InvalidArgument, Unsupported

CHECKSUM_AGENT = "checksum"
_CHUNK = 1 << 20


def run_repository_agents(config: Any, model_dir: Path) -> None:
    """Run the agents `config` names on `model_dir`; InvalidArgument / Unsupported with the reason when one
    refuses the model."""
    for agent in config.model_repository_agents.agents:
        if agent.name != CHECKSUM_AGENT:
            raise Unsupported(
                f"repository agent '{agent.name}' is not available: modelhost runs the "
                f"'{CHECKSUM_AGENT}' agent only (model '{config.name}')"
            )
        for key, expected in agent.parameters.items():
            _check_one(model_dir, key, expected)


def _check_one(model_dir: Path, key: str, expected: str) -> None:
    algorithm, sep, relative = key.partition(":")
    if not sep:
        raise InvalidArgument(f"failed to parse key: {key}")
    if algorithm.lower() != "md5":
        raise Unsupported(f"Unsupported checksum algorithm: {algorithm}")
    try:
        root = model_dir.resolve()
        path = (root / relative).resolve()
    except (OSError, RuntimeError) as e:  # RuntimeError: a symlink loop (Python 3.11)
        raise InvalidArgument(f"failed to open text file for read {relative}: {e}") from None
    if not path.is_relative_to(root):  # the agent reads the model's own files, nothing outside them
        raise InvalidArgument(f"checksum file {relative} is outside the model directory")
    if path.exists() and not path.is_file():  # a directory, or a FIFO that would block the loading thread
        raise InvalidArgument(f"failed to open text file for read {relative}: not a regular file")
    digest = hashlib.md5(usedforsecurity=False)
    try:
        with open(path, "rb") as file:
            while chunk := file.read(_CHUNK):
                digest.update(chunk)
    except OSError as e:
        raise InvalidArgument(f"failed to open text file for read {relative}: {e.strerror or e}") from None
    got = digest.hexdigest()
    if got != expected:
        raise InvalidArgument(f"Mismatched MD5 hash for file {relative}, expect: {expected}, got: {got}")
