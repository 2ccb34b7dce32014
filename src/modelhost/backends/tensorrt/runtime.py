"""The seam between the plain-Python backend and TensorRT/CUDA: what the loader asks of the runtime.

`adapter.TensorRTRuntime` implements it with the `tensorrt` package and the CUDA runtime; the unit tests with
fakes. Also here: turning what TensorRT logged about a plan it could not load into an error that says what to do.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from modelhost.backends.api import Arrays
from modelhost.backends.tensorrt.engine import EngineDescription
from modelhost.backends.tensorrt.settings import TensorRTSettings


class PlanLoadError(Exception):
    """TensorRT returned no engine for a plan; `messages` are the errors it logged while trying."""

    def __init__(self, messages: Sequence[str]) -> None:
        super().__init__("; ".join(messages) or "TensorRT returned no engine")
        self.messages = list(messages)


class EngineExecutor(Protocol):
    """One instance's execution contexts (one per profile), CUDA stream and device buffers."""

    def run(self, profile: int, inputs: Arrays, output_names: Sequence[str]) -> Arrays:
        """Run a batch on `profile`'s context; return the requested outputs as host arrays."""
        ...

    def close(self) -> None: ...


class LoadedEngine(Protocol):
    @property
    def description(self) -> EngineDescription: ...

    def create_executor(
        self, profiles: Sequence[int], settings: TensorRTSettings, device_id: int, max_batch_size: int
    ) -> EngineExecutor: ...


class EngineRuntime(Protocol):
    @property
    def version(self) -> str:
        """The installed TensorRT version."""
        ...

    def device_count(self) -> int: ...

    def compute_capability(self, device_id: int) -> str:
        """ "<major>.<minor>" of a CUDA device, the key of `cc_model_filenames`."""
        ...

    def load_plugins(self, paths: Sequence[str]) -> None: ...

    def deserialize(self, plan: bytes, device_id: int, *, version_compatible: bool) -> LoadedEngine:
        """The engine of a serialized plan on a device; PlanLoadError when TensorRT returns none."""
        ...


# What TensorRT 8.6-11 log when a plan does not fit the library or the GPU; matched loosely, as the wording
# moves between releases.
_VERSION = re.compile(
    r"not compatible with this version of TensorRT|version tag does not match|"
    r"expecting library version|serialization version",
    re.IGNORECASE,
)
_DEVICE = re.compile(r"incompatible device|expecting compute|hardware compatibility", re.IGNORECASE)
_HOST_CODE = re.compile(r"host code|EngineHostCodeAllowed|version.?compatib", re.IGNORECASE)
_MAGIC = re.compile(r"magic tag", re.IGNORECASE)


def plan_failure_message(
    model_name: str, path: Path, messages: Sequence[str], tensorrt_version: str, *, version_compatible: bool
) -> str:
    """Why a plan did not load and what to do about it, from TensorRT's own log lines."""
    said = "; ".join(messages) or "no error was logged"
    head = f"unable to load model '{model_name}': TensorRT {tensorrt_version} cannot load the plan '{path}'"
    rebuild = (
        "rebuild it on this host, from its ONNX model, with `modelhost convert onnx-to-tensorrt --onnx "
        f"model.onnx --output {path}`"
    )
    if any(_HOST_CODE.search(m) for m in messages) and not version_compatible:
        return (
            f"{head}: it is a version-compatible plan, which runs code from the plan itself; serve it with "
            f"--backend-config=tensorrt,version-compatible=true if you trust it, or {rebuild} (TensorRT said: "
            f"{said})"
        )
    if any(_VERSION.search(m) for m in messages):
        return (
            f"{head}: it was built by another TensorRT version, and a plan loads only into the version that "
            f"built it. Install that TensorRT version, or {rebuild}, or build it version-compatible "
            "(`trtexec --versionCompatible`, `modelhost convert onnx-to-tensorrt --version-compatible`) and serve "
            f"it with --backend-config=tensorrt,version-compatible=true (TensorRT said: {said})"
        )
    if any(_DEVICE.search(m) for m in messages):
        return (
            f"{head}: it was built for another GPU architecture, and a plan runs only on the kind of GPU that "
            f"built it (unless built hardware-compatible); {rebuild} (TensorRT said: {said})"
        )
    if any(_MAGIC.search(m) for m in messages):
        return f"{head}: the file is not a TensorRT plan, or is damaged (TensorRT said: {said})"
    return f"{head} (TensorRT said: {said})"


__all__ = ["EngineExecutor", "EngineRuntime", "LoadedEngine", "PlanLoadError", "plan_failure_message"]
