"""modelhost: a model inference server, drop-in compatible with NVIDIA Triton Inference Server."""

from __future__ import annotations

__version__ = "0.1.0"
# The protocol version reported in server metadata: the Triton release whose behaviour we follow.
TRITON_COMPAT_VERSION = "2.51.0"

__all__ = ["TRITON_COMPAT_VERSION", "__version__"]
