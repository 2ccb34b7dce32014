"""TorchScript models (`platform: "pytorch_libtorch"`, `model.pt`): a torch.jit module per instance, or one per
device shared by a model version's instances (ENABLE_WEIGHT_SHARING).

An execution runs forward() as Triton's backend does: under no_grad and, unless INFERENCE_MODE is false,
inference mode; with optimized execution unless DISABLE_OPTIMIZED_EXECUTION (a per-thread switch in torch); with
the JIT switches a model sets. forward() releases the GIL, so instances on their worker threads run in parallel.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from tritonclient.grpc.model_config_pb2 import DataType

from modelhost.backends import framework_warnings
from modelhost.backends.api import Arrays, BackendContext
from modelhost.backends.params import model_path
from modelhost.backends.pytorch.naming import InputBinding, OutputBinding, bind_inputs, bind_outputs
from modelhost.backends.pytorch.placement import Placement
from modelhost.backends.pytorch.results import collect
from modelhost.backends.pytorch.settings import TorchSettings
from modelhost.backends.pytorch.sharing import SHARED_MODULES, module_key
from modelhost.backends.pytorch.signature import forward_signature
from modelhost.backends.pytorch.tensors import STRING, check_config_tensors, strings_in, to_torch
from modelhost.backends.pytorch.threads import PROCESS_THREADS
from modelhost.errors import BackendInvalidArgument, InternalError, ModelConfigError, ModelhostError

log = logging.getLogger(__name__)

DEFAULT_FILENAME = "model.pt"


@dataclass(frozen=True, slots=True)
class Plan:
    """What an instance needs to run a batch, decided at load."""

    model: str
    settings: TorchSettings
    placement: Placement
    inputs: InputBinding
    outputs: OutputBinding
    output_types: dict[str, str]  # config datatype by output name (implicit state outputs included)
    string_inputs: frozenset[str]
    check_batch: bool  # outputs must have the batch size as first dimension
    thread_budget: int  # intra-op threads when no model set INTRA_OP_THREAD_COUNT


def load_module(model: str, version: int, path: Path, placement: Placement, inference_mode: bool) -> Any:
    try:
        # torch 2.13 deprecates TorchScript; Triton's backend still serves it, and so do we, without the noise.
        # Loaded as Triton loads it: under inference mode unless INFERENCE_MODE is false.
        with framework_warnings.ignored(DeprecationWarning), torch.inference_mode(inference_mode):
            return torch.jit.load(str(path), map_location=placement.map_location)  # type: ignore[no-untyped-call]
    except Exception as e:
        raise ModelConfigError(
            f"unable to load model '{model}' version {version}: failed to load TorchScript file '{path}' (a "
            f"model.pt must be a module saved with torch.jit.save, from torch.jit.script or torch.jit.trace): "
            f"{str(e).strip()}"
        ) from e


def _set_jit_switches(settings: TorchSettings) -> None:
    # Per thread in torch: each execution sets its model's.
    torch._C._set_graph_executor_optimize(settings.optimized_execution)
    # torch-global: set before each execution of a model that sets them, as Triton does; left alone otherwise.
    if settings.jit_executor is not None:
        torch._C._jit_set_profiling_executor(settings.jit_executor)
    if settings.jit_profiling is not None:
        torch._C._jit_set_profiling_mode(settings.jit_profiling)
    if settings.tensor_fuser is not None:
        torch._C._jit_set_texpr_fuser_enabled(settings.tensor_fuser)


class TorchScriptInstance:
    def __init__(self, name: str, module: Any, plan: Plan, release: Callable[[], None] | None) -> None:
        self.name = name
        self.module = module
        self.plan = plan
        self._release = release
        gpu = plan.placement.gpu
        self._stream = torch.cuda.Stream(gpu) if gpu is not None else None  # type: ignore[no-untyped-call]
        self._argument_names = {position: name for name, position in plan.inputs.positions.items()}

    def _arguments(self, inputs: Arrays) -> list[Any]:
        plan = self.plan
        device = plan.placement.inputs
        if plan.inputs.dict_input:
            return [{name: to_torch(array, device) for name, array in inputs.items()}]
        arguments: list[Any] = [None] * plan.inputs.arity
        for name, array in inputs.items():
            position = plan.inputs.positions.get(name)
            if position is not None:
                arguments[position] = (
                    strings_in(name, array) if name in plan.string_inputs else to_torch(array, device)
                )
        missing = [self._argument_names[i] for i, a in enumerate(arguments) if a is None]
        if missing:
            raise BackendInvalidArgument(
                f"input(s) {', '.join(repr(m) for m in missing)} of model '{plan.model}' not given: every "
                "forward() argument of a TorchScript model needs a value, so an optional input cannot be left out"
            )
        return arguments

    @contextlib.contextmanager
    def _device(self) -> Iterator[None]:
        gpu = self.plan.placement.gpu
        if gpu is None or self._stream is None:
            yield
            return
        with torch.cuda.device(gpu), torch.cuda.stream(self._stream):
            yield

    def execute(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        plan = self.plan
        settings = plan.settings
        PROCESS_THREADS.use(plan.thread_budget)
        batch = next(iter(inputs.values())).shape[0] if plan.check_batch and inputs else None
        try:
            # On a GPU, inputs are copied, the model run and outputs read on the instance's own stream.
            with torch.no_grad(), torch.inference_mode(settings.inference_mode), self._device():
                arguments = self._arguments(inputs)
                _set_jit_switches(settings)
                if plan.placement.uses_cuda:
                    # torch-global, set per execution as in Triton
                    torch.backends.cudnn.enabled = settings.cudnn
                result = self.module(*arguments)
                del arguments
                return collect(result, plan.outputs, output_names, plan.output_types, batch)
        except ModelhostError:
            raise
        except Exception as e:  # a fault in forward() fails this batch only
            raise InternalError(f"PyTorch execute failure: {str(e).strip()}") from e
        finally:
            if settings.cache_cleaning and plan.placement.uses_cuda:
                torch.cuda.empty_cache()

    def close(self) -> None:
        self.module = None
        if self._release is not None:
            self._release()
            self._release = None
        if self.plan.placement.uses_cuda:
            torch.cuda.empty_cache()


def _plan(
    ctx: BackendContext, module: Any, settings: TorchSettings, placement: Placement, budget: int, warn: bool
) -> Plan:
    model, config = ctx.model_name, ctx.config
    try:
        signature = forward_signature(module)
    except (AttributeError, RuntimeError) as e:
        raise ModelConfigError(
            f"unable to load model '{model}': the TorchScript module has no usable forward() method: {e}"
        ) from e
    inputs = bind_inputs(model, config, signature, warn=warn)
    outputs = bind_outputs(model, config, signature.returns, warn=warn)
    types = {s.output_name: DataType.Name(s.data_type) for s in config.sequence_batching.state}
    types.update({t.name: DataType.Name(t.data_type) for t in config.output})
    ragged = any(t.allow_ragged_batch for t in config.input) or bool(config.batch_output)
    return Plan(
        model=model,
        settings=settings,
        placement=placement,
        inputs=inputs,
        outputs=outputs,
        output_types=types,
        string_inputs=frozenset(t.name for t in config.input if DataType.Name(t.data_type) == STRING),
        check_batch=int(config.max_batch_size) > 0 and not ragged,
        thread_budget=budget,
    )


def load_torchscript(
    ctx: BackendContext, name: str, settings: TorchSettings, placement: Placement, budget: int, warn: bool
) -> TorchScriptInstance:
    """One instance named `name`; ModelConfigError where the file or the config cannot be served. `warn`: log
    warnings about the config (the load's first instance)."""
    check_config_tensors(ctx.model_name, ctx.config)
    path = model_path(ctx, DEFAULT_FILENAME)
    module, release, _ = SHARED_MODULES.load(
        settings.weight_sharing,
        partial(module_key, ctx.model_name, ctx.version, path, str(placement.map_location)),
        partial(load_module, ctx.model_name, ctx.version, path, placement, settings.inference_mode),
        f"Reusing TorchScript model for instance '{name}'",
    )
    try:
        plan = _plan(ctx, module, settings, placement, budget, warn)
    except BaseException:
        if release is not None:
            release()
        raise
    return TorchScriptInstance(name, module, plan, release)


__all__ = ["DEFAULT_FILENAME", "Plan", "TorchScriptInstance", "load_module", "load_torchscript"]
