"""One TensorRT model instance: checks a batch against the instance's profiles, then runs it on the GPU.

The shape check and the profile choice are plain Python (profiles.py); the executor (executor.py on a GPU, a
fake in the unit tests) does the TensorRT and CUDA work.
"""

from __future__ import annotations

from collections.abc import Sequence

from modelhost.backends.api import Arrays
from modelhost.backends.tensorrt.engine import EngineDescription, Shape
from modelhost.backends.tensorrt.profiles import choose_profile
from modelhost.backends.tensorrt.runtime import EngineExecutor
from modelhost.errors import BackendInvalidArgument, InternalError, ModelhostError


class TensorRTInstance:
    def __init__(
        self,
        name: str,
        model_name: str,
        engine: EngineDescription,
        profiles: Sequence[int],
        executor: EngineExecutor,
        keep_alive: object = None,
    ) -> None:
        self.name = name
        self.model_name = model_name
        self.engine = engine
        self.profiles = list(profiles)
        self.executor: EngineExecutor | None = executor
        # The loaded engine this instance's contexts belong to, kept until close (shared between instances of
        # a static-shape engine on one GPU, as Triton shares it).
        self._keep_alive = keep_alive

    def execute(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        if self.executor is None:
            raise InternalError(f"instance {self.name} of model '{self.model_name}' is closed")
        shapes: dict[str, Shape] = {}
        for tensor in self.engine.inputs:
            array = inputs.get(tensor.name)
            if array is None:
                # Optional config inputs may be left out; the engine has no notion of that.
                raise BackendInvalidArgument(
                    f"input '{tensor.name}' is required by the TensorRT engine of model '{self.model_name}' but "
                    "the request does not give it"
                )
            shapes[tensor.name] = tuple(int(d) for d in array.shape)
        profile = choose_profile(self.engine, self.profiles, shapes, self.name)
        try:
            return self.executor.run(profile, inputs, output_names)
        except ModelhostError:
            raise
        except Exception as e:  # a CUDA or TensorRT fault fails this batch only
            raise InternalError(f"TensorRT error for model '{self.model_name}': {e}") from e

    def close(self) -> None:
        executor, self.executor = self.executor, None
        if executor is not None:
            executor.close()
        self._keep_alive = None


__all__ = ["TensorRTInstance"]
