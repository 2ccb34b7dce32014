"""The Engine as it is built: every part given at construction (a bare engine: no logging extension, client shared
memory disabled, tracing off, no response cache), and the way a request enters it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from modelhost.backends.api import BackendServices
from modelhost.engine.engine import Engine
from modelhost.engine.registry.registry import ModelRegistry
from modelhost.engine.shared_memory import SharedMemoryRegistry
from modelhost.errors import NotFound, Unavailable, Unsupported
from modelhost.observability.log_settings import LogSettings
from modelhost.observability.tracing.tracer import Tracer
from modelhost.options.trace import TraceSettings
from modelhost.types import InferenceRequest


def no_models() -> ModelRegistry:
    """A registry that serves no model (and loads none on demand)."""

    def get(name: str, version: str = "") -> Any:
        raise NotFound(f"Request for unknown model: '{name}' is not found")

    settings = SimpleNamespace(load_on_demand=False)
    table = SimpleNamespace(get=get)
    registry = SimpleNamespace(models={}, get=get, table=table, settings=settings, services=BackendServices())
    return cast(ModelRegistry, registry)


def test_a_bare_engine_has_its_parts_off() -> None:
    engine = Engine(no_models())
    metadata = asyncio.run(engine.server_metadata())
    assert "system_shared_memory" not in metadata["extensions"] and metadata["name"] == "triton"
    with pytest.raises(Unsupported, match="the logging extension is not available"):
        asyncio.run(engine.logging_settings())
    assert not engine.tracer.enabled and engine.response_cache is None and not engine.shared_memory.allowed


def test_the_parts_given_are_the_engines() -> None:
    log_settings = cast(LogSettings, SimpleNamespace(get=lambda: {"log_info": True}))
    shared_memory = SharedMemoryRegistry(allowed=True)
    tracer = Tracer(TraceSettings(), None)
    engine = Engine(
        no_models(), server_id="mine", log_settings=log_settings, shared_memory=shared_memory, tracer=tracer
    )
    assert engine.shared_memory is shared_memory and engine.tracer is tracer
    assert asyncio.run(engine.logging_settings()) == {"log_info": True}
    metadata = asyncio.run(engine.server_metadata())
    assert metadata["name"] == "mine" and "system_shared_memory" in metadata["extensions"]


def test_a_request_fails_when_awaited_never_when_handed_over() -> None:
    engine = Engine(no_models())
    served = engine.infer(InferenceRequest("m"))  # the common case: straight to the serving coroutine
    with pytest.raises(NotFound):
        asyncio.run(served)
    engine.accepting = False
    stopping = engine.infer(InferenceRequest("m"))  # while draining: the check is the coroutine's
    with pytest.raises(Unavailable, match=r"^Server is stopping, scheduler for model has stopped accepting"):
        asyncio.run(stopping)
