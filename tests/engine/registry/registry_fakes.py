"""Entries for the registry's pure parts: models stand-ins with only what those parts read."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.engine.model import LoadedModel
from modelhost.engine.registry.entries import ModelEntry, ModelState, VersionEntry


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


def entry(
    name: str,
    *versions: tuple[int, ModelState, LoadedModel | None],
    cfg: Any = None,
    error: str = "",
) -> ModelEntry:
    e = ModelEntry(
        name, config=cfg if cfg is not None else config('backend: "onnxruntime"', name), error=error
    )
    for version, state, loaded in versions:
        e.versions[version] = VersionEntry(version, state, model=loaded)
    return e
