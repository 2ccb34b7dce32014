"""modelhost: a model inference server, drop-in compatible with NVIDIA Triton Inference Server."""

from __future__ import annotations

import importlib

__version__ = "0.1.0"
# The protocol version reported in server metadata: the Triton release whose behaviour we follow.
TRITON_COMPAT_VERSION = "2.51.0"

__all__ = ["TRITON_COMPAT_VERSION", "Model", "Server", "__version__"]


def __getattr__(name: str) -> object:
    # modelhost.Server and modelhost.Model (in_process.py), imported when first used: the command line and the
    # stub processes import this package and need none of the server. By name, not an import statement: the
    # package's root imports nothing at load, so this is no import cycle (tests/test_layout.py checks statements).
    if name in ("Server", "Model"):
        return getattr(importlib.import_module("modelhost.in_process"), name)
    raise AttributeError(f"module 'modelhost' has no attribute {name!r}")
