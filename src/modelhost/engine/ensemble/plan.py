"""An ensemble's graph, compiled once at load: its steps, which step produces and which consume each tensor.

The config alone was checked when it was read (config/validate_schedulers.py: steps present, every tensor
written once and used, outputs reachable). What needs the composing models is checked here, at load, once they
are loaded: every step's maps against its model's inputs and outputs, data types and shapes consistent along
every edge, batch sizes, and Triton's rule on decoupled models (a step may not join responses of two different
decoupled models). Messages are Triton's (core ensemble_utils.cc), so that tools matching on them still do.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tritonclient.grpc.model_config_pb2 import DataType

from modelhost.errors import ModelConfigError
from modelhost.io_specs import format_shape


@dataclass(frozen=True, slots=True)
class Step:
    index: int
    model_name: str
    model_version: str  # "" = the version the model's policy serves (config: -1)
    inputs: dict[str, str]  # model input -> ensemble tensor
    outputs: dict[str, str]  # model output -> ensemble tensor
    # Of the composing model, from its config at load: whether it batches, and its input dims (without the
    # batch dimension), to fit tensors between batching and non-batching models as Triton does.
    batching: bool = False
    input_dims: dict[str, tuple[int, ...]] = field(default_factory=dict)
    decoupled: bool = False


@dataclass(slots=True)
class _Node:
    """An ensemble tensor at load: its type and shape, the model it was inferred from, and its decoupled
    lineage (0 = the request's own; n = the responses of the n-th decoupled step on its path)."""

    model: str
    datatype: int
    dims: tuple[int, ...]
    batching: bool
    lineage: int = 0

    @property
    def full_dims(self) -> tuple[int, ...]:
        return ((-1,) if self.batching else ()) + self.dims


def _dims_match(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == -1 or y == -1 or x == y for x, y in zip(a, b, strict=True))


def _type_name(value: int) -> str:
    return str(DataType.Name(value))


class EnsemblePlan:
    def __init__(self, config: Any, composing: dict[str, Any]) -> None:
        """`composing`: the loaded config of every model the steps name (by name)."""
        self.name: str = config.name
        self.max_inflight = int(config.ensemble_scheduling.max_inflight_requests)
        self.steps = [
            self._step(i, s, composing[s.model_name]) for i, s in enumerate(config.ensemble_scheduling.step)
        ]
        self.producer: dict[str, Step] = {}
        self.consumers: dict[str, list[Step]] = {}
        for step in self.steps:
            for tensor in step.outputs.values():
                self.producer[tensor] = step
            for tensor in step.inputs.values():
                self.consumers.setdefault(tensor, []).append(step)
        self.decoupled = self._check(config, composing)
        self._pruned: dict[frozenset[str], frozenset[int]] = {}

    @staticmethod
    def _step(index: int, step: Any, model: Any) -> Step:
        version = int(step.model_version)
        return Step(
            index=index,
            model_name=step.model_name,
            model_version="" if version < 0 else str(version),
            inputs=dict(step.input_map),
            outputs=dict(step.output_map),
            batching=model.max_batch_size > 0,
            input_dims={
                t.name: tuple(int(d) for d in (t.reshape.shape if t.HasField("reshape") else t.dims))
                for t in model.input
            },
            decoupled=bool(model.model_transaction_policy.decoupled),
        )

    def needed_steps(self, outputs: Iterable[str]) -> frozenset[int]:
        """The steps a request asking for `outputs` runs: those the outputs depend on, and no others."""
        key = frozenset(outputs)
        needed = self._pruned.get(key)
        if needed is None:
            found: set[int] = set()
            todo = list(key)
            while todo:
                step = self.producer.get(todo.pop())
                if step is not None and step.index not in found:
                    found.add(step.index)
                    todo.extend(step.inputs.values())
            needed = self._pruned[key] = frozenset(found)
        return needed

    # -- load-time checks against the composing models ----------------------------------------------------------

    def _check(self, config: Any, composing: dict[str, Any]) -> bool:
        """Raise ModelConfigError on a mismatch; return whether the ensemble is decoupled (a decoupled step lies
        on the path of its outputs), as Triton decides it."""
        name = self.name
        batching = config.max_batch_size > 0
        nodes: dict[str, _Node] = {}
        for tensor in config.input:
            dims = tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims
            nodes[tensor.name] = _Node(name, tensor.data_type, tuple(dims), batching)
        for tensor in config.output:
            dims = tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims
            nodes.setdefault(tensor.name, _Node(name, tensor.data_type, tuple(dims), batching))
        lineages = 0
        for step in self._in_order({t.name for t in config.input}):
            model = composing[step.model_name]
            if model.max_batch_size != 0 and model.max_batch_size < config.max_batch_size:
                raise ModelConfigError(
                    f"ensemble {name} allows maximum batch size {config.max_batch_size}, but it contains model "
                    f"{step.model_name} which only allows maximum batch size to be {model.max_batch_size}"
                )
            step_batching = model.max_batch_size > 0
            inputs = {t.name: t for t in model.input}
            for model_input, tensor in step.inputs.items():
                if model_input not in inputs:
                    raise ModelConfigError(
                        f"in ensemble {name}, ensemble tensor {tensor} is mapping to non-existing input "
                        f"{model_input} in model {step.model_name}"
                    )
            for model_input in model.input:
                if model_input.name not in step.inputs:
                    if model_input.optional:
                        continue
                    raise ModelConfigError(
                        f"in ensemble {name}, input {model_input.name} in model {step.model_name} is not mapped "
                        "to any ensemble tensors"
                    )
                tensor = step.inputs[model_input.name]
                node = _Node(step.model_name, model_input.data_type, tuple(model_input.dims), step_batching)
                self._consistent(config, tensor, nodes.setdefault(tensor, node), node)
            source_lineages = {nodes[t].lineage for t in step.inputs.values() if t in nodes}
            if len(source_lineages) > 1:
                raise ModelConfigError(
                    f"in ensemble {name}, step of model '{step.model_name}' receives inputs originated from "
                    "different decoupled models"
                )
            lineage = next(iter(source_lineages), 0)
            if step.decoupled:
                lineages += 1
                lineage = lineages
            outputs = {t.name: t for t in model.output}
            for model_output, tensor in step.outputs.items():
                spec = outputs.get(model_output)
                if spec is None:
                    raise ModelConfigError(
                        f"in ensemble {name}, ensemble tensor {tensor} is mapped from non-existing output "
                        f"{model_output} in model {step.model_name}"
                    )
                node = _Node(step.model_name, spec.data_type, tuple(spec.dims), step_batching, lineage)
                known = nodes.get(tensor)
                if known is None:
                    nodes[tensor] = node
                else:
                    self._consistent(config, tensor, known, node)
                    known.model, known.lineage = step.model_name, lineage
        # The ensemble's outputs meet as the inputs of one more step, the ensemble's response (Triton's sink node).
        output_lineages = {nodes[t.name].lineage for t in config.output if t.name in nodes}
        if len(output_lineages) > 1:
            raise ModelConfigError(
                f"in ensemble {name}, step of model '{name}' receives inputs originated from different decoupled "
                "models"
            )
        return any(output_lineages)

    def _in_order(self, inputs: set[str]) -> list[Step]:
        """The steps in an order where each comes after the steps producing its inputs (the config may list them
        in any order; it was checked to have no cycles)."""
        ready, ordered, left = set(inputs), [], list(self.steps)
        while left:
            runnable = [s for s in left if set(s.inputs.values()) <= ready] or left[:1]
            for step in runnable:
                left.remove(step)
                ordered.append(step)
                ready.update(step.outputs.values())
        return ordered

    def _consistent(self, config: Any, tensor: str, known: _Node, node: _Node) -> None:
        prefix = f"in ensemble {self.name}, ensemble tensor {tensor}: "
        if known.datatype != node.datatype:
            raise ModelConfigError(
                prefix + f"inconsistent data type: {_type_name(known.datatype)} is inferred from model "
                f"{known.model} while {_type_name(node.datatype)} is inferred from model {node.model}"
            )
        # A tensor may join a batching and a non-batching model: then [-1, d...] on one side matches [d...].
        if not _dims_match(known.dims, node.dims) and not _dims_match(known.full_dims, node.full_dims):
            raise ModelConfigError(
                prefix + f"inconsistent shape: {format_shape(known.full_dims)} is inferred from model "
                f"{known.model} while {format_shape(node.full_dims)} is inferred from model {node.model}"
            )


__all__ = ["EnsemblePlan", "Step"]
