"""The core: one entry point for every frontend. Frontends call these methods and never touch a scheduler."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from modelhost import TRITON_COMPAT_VERSION
from modelhost.config import config_to_json
from modelhost.errors import ModelhostError, Unavailable
from modelhost.metrics import Metrics
from modelhost.registry import ModelRegistry
from modelhost.types import InferenceRequest, InferenceResponse

log = logging.getLogger("modelhost.server")

# Extensions listed in server metadata: only the ones this server implements.
EXTENSIONS = ["classification", "model_configuration", "binary_tensor_data", "parameters"]


class Server:
    def __init__(
        self,
        registry: ModelRegistry,
        metrics: Metrics | None = None,
        *,
        server_id: str = "triton",
        strict_readiness: bool = True,
    ) -> None:
        self.registry = registry
        self.metrics = metrics or Metrics()
        self.server_id = server_id
        self.strict_readiness = strict_readiness
        self.live = True
        self.accepting = True
        self._in_flight = 0
        self._drained = asyncio.Event()
        self._drained.set()

    # -- health and metadata -----------------------------------------------------------------------------------

    def is_live(self) -> bool:
        return self.live

    def is_ready(self) -> bool:
        if not (self.live and self.accepting):
            return False
        return self.registry.all_ready() if self.strict_readiness else True

    def model_ready(self, name: str, version: str = "") -> bool:
        try:
            self.registry.get(name, version)
        except Exception:
            return False
        return True

    def metadata(self) -> dict[str, Any]:
        return {"name": self.server_id, "version": TRITON_COMPAT_VERSION, "extensions": EXTENSIONS}

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        model = self.registry.get(name, version)
        return {"name": name, "versions": self.registry.ready_versions(name), **model.metadata()}

    def model_config(self, name: str, version: str = "") -> Any:
        return self.registry.get(name, version).config

    def model_config_json(self, name: str, version: str = "") -> dict[str, Any]:
        return config_to_json(self.model_config(name, version))

    def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
        return self.registry.index(ready_only)

    # -- inference ---------------------------------------------------------------------------------------------

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        if not self.accepting:
            raise Unavailable("Server is shutting down: no new inference requests are accepted")
        model = self.registry.get(request.model_name, request.model_version)
        counters = model.metrics
        if counters is None:
            counters = model.metrics = self.metrics.for_model(model.name, model.version_str)
        self._in_flight += 1
        self._drained.clear()
        started = time.perf_counter_ns()
        try:
            response, batch = await model.infer(request)
        except ModelhostError as e:
            counters.failed("BACKEND" if e.http_status >= 500 else "OTHER", time.perf_counter_ns() - started)
            raise
        except BaseException:
            counters.failed("CANCELED", time.perf_counter_ns() - started)
            raise
        else:
            counters.succeeded(batch, time.perf_counter_ns() - started)
            return response
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._drained.set()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def drain(self, timeout: float) -> bool:
        """Stop accepting and wait for in-flight requests; False if some were still running at the timeout."""
        self.accepting = False
        try:
            await asyncio.wait_for(self._drained.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        self.live = False
        self.registry.close()
