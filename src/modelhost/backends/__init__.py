"""Backends: the runtimes that execute a model. Each one turns a config and a version directory into instances."""

from __future__ import annotations

from modelhost.backends.base import Backend, BackendContext, ModelInstance, backend_for

__all__ = ["Backend", "BackendContext", "ModelInstance", "backend_for"]
