"""Stand-ins for the registry's parts: configs, entries, loaded versions with only what those parts read, a
backend whose instances do nothing, and model directories of a repository."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.backends.api import BackendContext
from modelhost.engine.model import LoadedModel
from modelhost.engine.registry.entries import ModelEntry, ModelState, VersionEntry
from modelhost.errors import ModelhostError


def config(text: str = "", name: str = "m") -> Any:
    return text_format.Parse(f'name: "{name}" {text}', ModelConfig())


def ensemble(name: str, *steps: str) -> Any:
    body = " ".join(
        f'step {{ model_name: "{s}" model_version: -1 input_map {{ key: "I" value: "x" }} '
        f'output_map {{ key: "O" value: "y{i}" }} }}'
        for i, s in enumerate(steps)
    )
    return config(f'platform: "ensemble" ensemble_scheduling {{ {body} }}', name)


def model(memory: int = 0, last_ms: int = 0, loaded_ms: int = 0) -> LoadedModel:
    stats = SimpleNamespace(memory_bytes=memory, last_inference_ms=last_ms)
    return cast(LoadedModel, SimpleNamespace(stats=stats, loaded_at_ms=loaded_ms))


class FakeModel:
    """A loaded version as the table and the budget see it: its memory and last use, requests in flight
    (`busy`; `answer` ends one), drained once they are answered, and how often it was closed."""

    def __init__(
        self, name: str = "m", version: int = 1, memory: int = 0, last_ms: int = 0, loaded_ms: int = 0
    ) -> None:
        self.name = name
        self.version = version
        self.stats = SimpleNamespace(memory_bytes=memory, last_inference_ms=last_ms)
        self.loaded_at_ms = loaded_ms
        self.in_flight = 0
        self.closed = 0
        self._idle: asyncio.Event | None = None

    @property
    def busy(self) -> bool:
        return self.in_flight > 0

    def answer(self) -> None:
        self.in_flight -= 1
        if not self.in_flight and self._idle is not None:
            self._idle.set()

    async def drained(self) -> None:
        while self.in_flight:
            self._idle = asyncio.Event()
            await self._idle.wait()

    def close(self) -> None:
        self.closed += 1


def entry(
    name: str,
    *versions: tuple[int, ModelState, LoadedModel | FakeModel | None],
    cfg: Any = None,
    error: str = "",
) -> ModelEntry:
    e = ModelEntry(
        name, config=cfg if cfg is not None else config('backend: "onnxruntime"', name), error=error
    )
    for version, state, loaded in versions:
        e.versions[version] = VersionEntry(version, state, model=cast(LoadedModel | None, loaded))
    return e


def ready(name: str, *versions: int, memory: int = 0, last_ms: int = 0, cfg: Any = None) -> ModelEntry:
    """An entry whose versions serve, each a FakeModel."""
    return entry(
        name,
        *((v, ModelState.READY, FakeModel(name, v, memory, last_ms)) for v in versions or (1,)),
        cfg=cfg,
    )


def fake(e: ModelEntry, version: int = 1) -> FakeModel:
    """The FakeModel of an entry's version."""
    return cast(FakeModel, e.versions[version].model)


# -- a backend whose instances do nothing --------------------------------------------------------------------


class FakeInstance:
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False

    def execute(self, inputs: Any, output_names: list[str]) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        self.closed = True


class FakeBackend:
    """Builds FakeInstances. `outcomes`, one per instance load in turn: the error it raises (None: it builds);
    then every load builds, but where the version directory has a `fail` file: that raises, its text the
    reason."""

    name = "regfake"

    def __init__(self, *outcomes: BaseException | None) -> None:
        self.outcomes = list(outcomes)
        self.loads: list[tuple[str, int, str, int]] = []  # (model, version, group, index)
        self.instances: list[FakeInstance] = []

    def load_instance(self, ctx: BackendContext, group: Any, index: int, device: int) -> FakeInstance:
        self.loads.append((ctx.model_name, ctx.version, group.name, index))
        failure = self.outcomes.pop(0) if self.outcomes else None
        if failure is not None:
            raise failure
        fail = ctx.version_dir / "fail"
        if fail.is_file():
            raise ModelhostError(fail.read_text())
        instance = FakeInstance(f"{group.name}_{index}")
        self.instances.append(instance)
        return instance


# The configuration of a model FakeBackend serves (its name and the rest added by `write_model`).
FAKE_MODEL = (
    'backend: "regfake" max_batch_size: 0 input [ { name: "I" data_type: TYPE_FP32 dims: [ 1 ] } ] '
    'output [ { name: "O" data_type: TYPE_FP32 dims: [ 1 ] } ]'
)


def write_model(repo: Path, name: str, versions: Iterable[int] = (1,), extra: str = "") -> Path:
    """A model directory of FakeBackend's with these version directories; `extra`: more of its config."""
    model_dir = repo / name
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(f'name: "{name}" {FAKE_MODEL} {extra}\n')
    for version in versions:
        (model_dir / str(version)).mkdir(exist_ok=True)
    return model_dir
