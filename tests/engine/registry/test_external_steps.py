"""An ensemble whose composing model another engine serves (`services.external_models`, as a Ray cluster's
deployments do for each other): it loads with that model's configuration without loading the model itself,
answers through it, is ready while it is, and fails to load, in Triton's words, where it cannot serve.

Two in-process servers: one holds `simple`, the other's repository only `simple_ensemble`."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import modelhost
from modelhost.errors import InvalidArgument, Unavailable
from modelhost.types import InferenceRequest, InferenceResponse

EXAMPLES = Path(modelhost.__file__).parent / "examples"


class OtherServer:
    """ExternalModels over another in-process server."""

    def __init__(self, server: modelhost.Server, names: set[str]) -> None:
        self.server = server
        self.names = names
        self.asked: list[tuple[str, set[int]]] = []
        self.refusal = ""
        self.up = True

    def serves(self, name: str) -> bool:
        return name in self.names

    async def config(self, name: str, versions: set[int]) -> Any:
        self.asked.append((name, versions))
        if self.refusal:
            raise Unavailable(self.refusal)
        return await asyncio.wrap_future(self.server.submit(self.server.engine.model_config(name)))

    def healthy(self, name: str, version: str = "") -> bool:
        return self.up

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        return await asyncio.wrap_future(self.server.submit(self.server.engine.infer(request)))

    async def infer_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        yield await self.infer(request)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[modelhost.Server, modelhost.Server]]:
    holding, using = tmp_path_factory.mktemp("holding"), tmp_path_factory.mktemp("using")
    shutil.copytree(EXAMPLES / "simple", holding / "simple")
    shutil.copytree(EXAMPLES / "simple_ensemble", using / "simple_ensemble")
    with (
        modelhost.Server(holding) as other,
        modelhost.Server(using, model_control_mode="explicit", load_models=[]) as server,
    ):
        yield other, server


@pytest.fixture
def elsewhere(servers: tuple[modelhost.Server, modelhost.Server]) -> OtherServer:
    other, server = servers
    found = OtherServer(other, {"simple"})
    engine: Any = server.engine
    engine.registry.services.external_models = found
    return found


def _inputs() -> dict[str, np.ndarray]:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    return {"INPUT0": a, "INPUT1": np.ones((1, 16), np.int32)}


def _count(server: modelhost.Server, name: str) -> int:
    return int(server.model(name).statistics()[0]["inference_stats"]["success"]["count"])


def test_the_ensemble_runs_its_steps_on_the_engine_serving_them(
    servers: tuple[modelhost.Server, modelhost.Server], elsewhere: OtherServer
) -> None:
    other, server = servers
    before = _count(other, "simple")
    ensemble = server.load("simple_ensemble")
    assert elsewhere.asked == [("simple", {-1})]  # once, for both steps, with the versions they name
    answer = ensemble.infer(_inputs())
    np.testing.assert_array_equal(answer["OUTPUT0"], 2 * _inputs()["INPUT0"])
    np.testing.assert_array_equal(answer["OUTPUT1"], 2 * _inputs()["INPUT1"])
    assert _count(other, "simple") == before + 2  # both steps, counted where they ran
    # Nothing of `simple` loaded here: its repository does not even hold it.
    assert [m["name"] for m in server.models(ready_only=True)] == ["simple_ensemble"]
    assert ensemble.ready()
    elsewhere.up = False
    assert not ensemble.ready()
    server.unload("simple_ensemble")


def test_a_composing_model_that_cannot_serve_fails_the_load_with_why(
    servers: tuple[modelhost.Server, modelhost.Server], elsewhere: OtherServer
) -> None:
    _, server = servers
    elsewhere.refusal = "application 'simple' is deploy_failed: the model file is broken"
    with pytest.raises(InvalidArgument) as failed:
        server.load("simple_ensemble")
    assert str(failed.value) == (
        "failed to load 'simple_ensemble', failed to poll from model repository: ensemble simple_ensemble "
        "contains models that are not available or ambiguous: simple (application 'simple' is deploy_failed: "
        "the model file is broken)"
    )
    assert not server.model("simple_ensemble").ready()
