"""Backends: the runtimes that execute a model. Each one turns a config and a version directory into instances."""

from __future__ import annotations

from modelhost.backends.api import Backend, BackendContext, ModelInstance
from modelhost.backends.registry import backend_for, register

__all__ = ["Backend", "BackendContext", "ModelInstance", "backend_for", "register"]
