"""AOTInductor packages (`platform: "torch_aoti"`, `model.pt2` from torch._inductor.aoti_compile_and_package),
loaded with torch._inductor.aoti_load_package and run on flat lists of tensors.

A package does not say its inputs' dtypes and shapes, and its compiled code trusts them: a tensor of another shape
would be read out of bounds. So packages run with AOTInductor's own input checks on (AOTI_RUNTIME_CHECK_INPUTS=1,
unless the environment sets it): a request that does not fit the compiled model fails with AOTInductor's reason
as a 400, and a load probes the package once to refuse a config it contradicts (aoti_probe.py).

Batching: the model takes whatever batch dimension it was exported with; max_batch_size > 0 works for a model
exported with a dynamic first dimension (Triton 26.03+ does not batch above 1 on this path).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from tritonclient.grpc.model_config_pb2 import DataType

from modelhost.backends import framework_warnings
from modelhost.backends.api import Arrays, BackendContext
from modelhost.backends.params import model_path
from modelhost.backends.pytorch.aoti_probe import CHECK_INPUTS, probe
from modelhost.backends.pytorch.call_spec import bind_flat, input_names, output_names
from modelhost.backends.pytorch.placement import Placement
from modelhost.backends.pytorch.results import output_array
from modelhost.backends.pytorch.settings import TorchSettings
from modelhost.backends.pytorch.sharing import SHARED_MODULES, module_key
from modelhost.backends.pytorch.tensors import STRING, check_config_tensors, to_torch
from modelhost.backends.pytorch.threads import PROCESS_THREADS
from modelhost.errors import BackendInvalidArgument, InternalError, ModelConfigError, ModelhostError

log = logging.getLogger(__name__)

DEFAULT_FILENAME = "model.pt2"
# AOTInductor's input-check failures (a request the compiled model cannot take), as opposed to runtime faults.
_INPUT_FAULTS = ("input_handles[", "expected inputs vector size", "Error in op: input")


@dataclass(frozen=True, slots=True)
class AotiPlan:
    model: str
    settings: TorchSettings
    inputs: torch.device  # where the package's compiled code wants its inputs
    input_positions: dict[str, int]
    input_count: int
    output_positions: dict[str, int]
    output_types: dict[str, str]
    check_batch: bool
    thread_budget: int


def load_package(model: str, version: int, path: Path, device_index: int) -> Any:
    # Read by the compiled code on its first run: set before any package runs.
    os.environ.setdefault(CHECK_INPUTS, "1")
    try:
        import torch._inductor  # here, not at the top: it takes a second, and TorchScript models do not need it

        with framework_warnings.ignored(FutureWarning):  # torch's own pytree deprecations while it loads
            return torch._inductor.aoti_load_package(str(path), device_index=device_index)
    except Exception as e:
        raise ModelConfigError(
            f"unable to load model '{model}' version {version}: failed to load AOTInductor package '{path}' (a "
            f"model.pt2 must come from torch._inductor.aoti_compile_and_package): {str(e).strip()}"
        ) from e


def _input_device(model: str, package: Any, placement: Placement) -> torch.device:
    """Where inputs go: the package is compiled for one device kind, which the instance kind must match."""
    compiled = str(package.get_metadata().get("AOTI_DEVICE_KEY", "cpu"))
    if placement.kind == "KIND_GPU" and compiled == "cpu":
        raise ModelConfigError(
            f"unable to load model '{model}': model.pt2 was compiled for the CPU, and instance group kind KIND_GPU "
            "runs on a GPU: use KIND_CPU, or compile the package on a GPU"
        )
    if placement.kind == "KIND_CPU" and compiled != "cpu":
        raise ModelConfigError(
            f"unable to load model '{model}': model.pt2 was compiled for '{compiled}', and instance group kind "
            "KIND_CPU runs on the CPU: use KIND_GPU, or compile the package for the CPU"
        )
    if placement.kind == "KIND_MODEL":
        return torch.device(compiled)
    return placement.inputs


class AotiInstance:
    def __init__(self, name: str, package: Any, plan: AotiPlan, release: Callable[[], None] | None) -> None:
        self.name = name
        self.package = package
        self.plan = plan
        self._release = release
        self._names = {position: name for name, position in plan.input_positions.items()}

    def _flat_inputs(self, inputs: Arrays) -> list[torch.Tensor]:
        plan = self.plan
        flat: list[torch.Tensor | None] = [None] * plan.input_count
        for name, array in inputs.items():
            position = plan.input_positions.get(name)
            if position is not None:
                flat[position] = to_torch(array, plan.inputs)
        missing = [self._names[i] for i, t in enumerate(flat) if t is None]
        if missing:
            raise BackendInvalidArgument(
                f"input(s) {', '.join(repr(m) for m in missing)} of model '{plan.model}' not given: an "
                "AOTInductor model needs every input, so an optional input cannot be left out"
            )
        return [t for t in flat if t is not None]

    def execute(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        plan = self.plan
        PROCESS_THREADS.use(plan.thread_budget)
        flat = self._flat_inputs(inputs)
        batch = next(iter(inputs.values())).shape[0] if plan.check_batch and inputs else None
        uses_cuda = plan.inputs.type == "cuda"
        try:
            with torch.no_grad(), torch.inference_mode(plan.settings.inference_mode):
                if uses_cuda:
                    torch.backends.cudnn.enabled = plan.settings.cudnn  # torch-global, set per execution
                results = self.package.loader.run(flat)
            del flat
            return {
                name: output_array(name, results[plan.output_positions[name]], plan.output_types[name], batch)
                for name in output_names
            }
        except ModelhostError:
            raise
        except Exception as e:
            message = str(e).strip()
            if any(fault in message for fault in _INPUT_FAULTS):
                raise BackendInvalidArgument(f"model '{plan.model}' cannot take this input: {message}") from e
            raise InternalError(f"PyTorch execute failure: {message}") from e
        finally:
            if plan.settings.cache_cleaning and uses_cuda:
                torch.cuda.empty_cache()

    def close(self) -> None:
        self.package = None
        if self._release is not None:
            self._release()
            self._release = None
        if self.plan.inputs.type == "cuda":
            torch.cuda.empty_cache()


def aoti_plan(
    ctx: BackendContext,
    package: Any,
    settings: TorchSettings,
    placement: Placement,
    budget: int,
    warn: bool = True,
) -> AotiPlan:
    """How the config's tensors map onto the package's flat inputs and outputs; ModelConfigError where not."""
    model, config = ctx.model_name, ctx.config
    if config.HasField("sequence_batching"):
        raise ModelConfigError(
            f"unable to load model '{model}': sequence batching is not supported for torch_aoti models (as in "
            "Triton)"
        )
    for tensor in [*config.input, *config.output]:
        if DataType.Name(tensor.data_type) == STRING:
            raise ModelConfigError(
                f"unable to load model '{model}': '{tensor.name}' is TYPE_STRING, and an AOTInductor model takes "
                "and returns tensors only"
            )
    in_spec, out_spec = package.loader.get_call_spec()
    spec_inputs, spec_outputs = input_names(in_spec), output_names(out_spec)
    names = [t.name for t in config.input] + [n for b in config.batch_input for n in b.target_name]
    if len(names) != len(spec_inputs):
        raise ModelConfigError(
            f"unable to load model '{model}', configuration expects {len(names)} inputs, model provides "
            f"{len(spec_inputs)} ({', '.join(spec_inputs)})"
        )
    inputs = bind_flat(model, "input", names, spec_inputs, warn=warn)
    if len(set(inputs.values())) != len(inputs):
        raise ModelConfigError(f"unable to load model '{model}': two inputs refer to the same model input")
    outputs = bind_flat(model, "output", [t.name for t in config.output], spec_outputs, warn=warn)
    ragged = any(t.allow_ragged_batch for t in config.input) or bool(config.batch_output)
    return AotiPlan(
        model=model,
        settings=settings,
        inputs=_input_device(model, package, placement),
        input_positions=inputs,
        input_count=len(spec_inputs),
        output_positions=outputs,
        output_types={t.name: DataType.Name(t.data_type) for t in config.output},
        check_batch=int(config.max_batch_size) > 0 and not ragged,
        thread_budget=budget,
    )


def load_aoti(
    ctx: BackendContext, name: str, settings: TorchSettings, placement: Placement, budget: int, warn: bool
) -> AotiInstance:
    check_config_tensors(ctx.model_name, ctx.config)
    path = model_path(ctx, DEFAULT_FILENAME)
    device_index = placement.gpu if placement.gpu is not None else -1
    package, release, reused = SHARED_MODULES.load(
        settings.weight_sharing,
        partial(module_key, ctx.model_name, ctx.version, path, str(placement.map_location)),
        partial(load_package, ctx.model_name, ctx.version, path, device_index),
        f"Reusing Inductor model loader for instance '{name}'",
    )
    try:
        plan = aoti_plan(ctx, package, settings, placement, budget, warn)
        if not reused:
            configured = {t.name for t in ctx.config.input}
            positions = {n: p for n, p in plan.input_positions.items() if n in configured}
            probe(ctx.model_name, ctx.config, package, positions, plan.inputs)
    except BaseException:
        if release is not None:
            release()
        raise
    return AotiInstance(name, package, plan, release)


__all__ = ["AotiInstance", "AotiPlan", "aoti_plan", "load_aoti", "load_package"]
