"""Validation of the schedulers of a config: dynamic_batching, sequence_batching, ensemble_scheduling.

Messages follow Triton core's ValidateModelConfig / ValidateEnsembleSchedulingConfig wording.
"""

from __future__ import annotations

from typing import Any

from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig, ModelQueuePolicy, ModelSequenceBatching

from modelhost.config import constants as c
from modelhost.config.invalid import InvalidConfig

_Control = ModelSequenceBatching.Control
_BOOLEAN_CONTROLS = (
    _Control.CONTROL_SEQUENCE_START,
    _Control.CONTROL_SEQUENCE_END,
    _Control.CONTROL_SEQUENCE_READY,
)
_CORRID_TYPES = (
    DataType.TYPE_UINT64,
    DataType.TYPE_INT64,
    DataType.TYPE_UINT32,
    DataType.TYPE_INT32,
    DataType.TYPE_STRING,
)


def _check_preferred(sizes: Any, max_batch_size: int, what: str, name: str) -> None:
    for size in sizes:
        if size <= 0:
            raise InvalidConfig(f"{what} must be positive for {name}")
        if size > max_batch_size:
            raise InvalidConfig(f"{what} must be <= max batch size for {name}")


def _delays(policy: Any) -> bool:
    return bool(policy.default_timeout_microseconds != 0 and policy.timeout_action == ModelQueuePolicy.DELAY)


def validate_dynamic_batching(config: ModelConfig) -> None:
    batcher, name = config.dynamic_batching, config.name
    _check_preferred(
        batcher.preferred_batch_size, config.max_batch_size, "dynamic batching preferred size", name
    )
    levels = batcher.priority_levels
    if levels != 0:
        if not 1 <= batcher.default_priority_level <= levels:
            raise InvalidConfig(f"default priority level must be in range [1, {levels}] for {name}")
        for level in batcher.priority_queue_policy:
            if not 1 <= level <= levels:
                raise InvalidConfig(
                    f"priority queue policy must have priority level in range [1, {levels}] for {name}"
                )
    if batcher.preserve_ordering:
        if levels > 1:
            raise InvalidConfig(
                f"Only one priority level is allowed when 'preserve_ordering' is true for {name}"
            )
        policies = [batcher.default_queue_policy, *batcher.priority_queue_policy.values()]
        if any(_delays(policy) for policy in policies):
            raise InvalidConfig(
                "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for "
                f"{name}"
            )


def _check_control(control: Any, kind_name: str, name: str, typed: bool) -> None:
    given = [
        field
        for field in ("int32_false_true", "fp32_false_true", "bool_false_true")
        if len(getattr(control, field)) > 0
    ]
    if typed:
        if given:
            raise InvalidConfig(
                "sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or "
                f"'bool_false_true' for {kind_name} for {name}"
            )
        if control.data_type not in _CORRID_TYPES:
            raise InvalidConfig(
                f"unexpected data type for control {kind_name} for {name}. Allowed data types are "
                "TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"
            )
        return
    if not given:
        raise InvalidConfig(
            "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
            f"'bool_false_true' for {kind_name} for {name}"
        )
    if len(given) > 1:
        raise InvalidConfig(
            "sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and "
            f"'bool_false_true' for {kind_name} for {name}"
        )
    if len(getattr(control, given[0])) != 2:
        raise InvalidConfig(
            f"sequence batching control '{given[0]}' must have exactly 2 entries for {kind_name} for {name}"
        )


def _check_sequence_controls(batcher: Any, name: str) -> None:
    tensors: set[str] = set()
    seen_kinds: set[int] = set()
    for control_input in batcher.control_input:
        if not control_input.name:
            raise InvalidConfig(f"sequence batching control tensor must have a name for {name}")
        if control_input.name in tensors:
            raise InvalidConfig(
                f"sequence batching control tensor '{control_input.name}' is specified for multiple control "
                f"kinds for {name}"
            )
        tensors.add(control_input.name)
        for control in control_input.control:
            kind_name = _Control.Kind.Name(control.kind)
            if control.kind in seen_kinds:
                raise InvalidConfig(f"sequence batching specifies multiple {kind_name} tensors for {name}")
            seen_kinds.add(control.kind)
            typed = control.kind == _Control.CONTROL_SEQUENCE_CORRID
            if typed or control.kind in _BOOLEAN_CONTROLS:
                _check_control(control, kind_name, name, typed)


def validate_sequence_batching(config: ModelConfig) -> None:
    batcher, name = config.sequence_batching, config.name
    if config.response_cache.enable:
        raise InvalidConfig(
            f"Response Cache does not currently support model {name} with sequence batching scheduler. "
            "Please disable the response cache."
        )
    _check_sequence_controls(batcher, name)
    if batcher.HasField("oldest"):
        _check_preferred(
            batcher.oldest.preferred_batch_size,
            config.max_batch_size,
            "sequence batching preferred batch size",
            name,
        )
    if batcher.HasField("direct") and not 0.0 <= batcher.direct.minimum_slot_utilization <= 1.0:
        raise InvalidConfig(
            f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for {name}"
        )


def _check_ensemble_steps(config: ModelConfig) -> dict[str, list[set[str]]]:
    """Per ensemble tensor: [tensors it is computed from, tensors computed from it]; checks each step."""
    name = config.name
    graph: dict[str, list[set[str]]] = {}
    written: set[str] = set()
    for index, step in enumerate(config.ensemble_scheduling.step):
        for field in ("model_name", "input_map", "output_map"):
            if not getattr(step, field):
                raise InvalidConfig(f"must specify '{field}' in step {index} of ensemble '{name}'")
        for tensor in step.output_map.values():
            if tensor in written:
                raise InvalidConfig(
                    f"ensemble tensor '{tensor}' can appear in an output map only once for ensemble '{name}' "
                    f"step {index}"
                )
            written.add(tensor)
            graph.setdefault(tensor, [set(), set()])
        for source in step.input_map.values():
            node = graph.setdefault(source, [set(), set()])
            for tensor in step.output_map.values():
                graph[tensor][0].add(source)
                node[1].add(tensor)
    return graph


def _unconnected_source(config: ModelConfig, tensor: str, ready: set[str]) -> str:
    """Where an unwritten tensor's chain breaks, as Triton finds it: from the tensor, follow the first source
    (in step and input-map order) that is not ready and not seen, until there is none."""
    seen: set[str] = set()
    last = tensor
    while True:
        sources = [
            src
            for step in config.ensemble_scheduling.step
            if last in step.output_map.values()
            for src in step.input_map.values()
        ]
        following = next((src for src in sources if src not in ready and src not in seen), None)
        if following is None:
            return last
        seen.add(following)
        last = following


def validate_ensemble(config: ModelConfig) -> None:
    name = config.name
    if config.platform != c.ENSEMBLE_PLATFORM:
        raise InvalidConfig(
            f"ensemble scheduling cannot be set for model '{name}' whose platform is not "
            f"{c.ENSEMBLE_PLATFORM}"
        )
    if config.instance_group:
        raise InvalidConfig(f"instance group should not be specified for ensemble '{name}'")
    if config.HasField("optimization"):
        raise InvalidConfig(f"optimization should not be specified for ensemble '{name}'")
    if config.model_warmup:
        raise InvalidConfig(f"model_warmup can not be specified for ensemble '{name}'")
    if not config.ensemble_scheduling.step:
        raise InvalidConfig(f"must specify 'step' for ensemble '{name}'")
    graph = _check_ensemble_steps(config)
    ready: set[str] = set()
    # "for ensemble <name>' is not used": Triton's wording, unbalanced quote included, kept for matching.
    for model_input in config.input:
        if model_input.name not in graph:
            raise InvalidConfig(f"ensemble input '{model_input.name}' for ensemble {name}' is not used")
        ready.add(model_input.name)
    changed = True
    while changed:  # a tensor is ready once every tensor it is computed from is ready
        changed = False
        for tensor, (sources, _) in graph.items():
            if tensor not in ready and sources and sources <= ready:
                ready.add(tensor)
                changed = True
    outputs = set()
    for model_output in config.output:
        if model_output.name not in graph:
            raise InvalidConfig(f"ensemble output '{model_output.name}' for ensemble {name}' is not used")
        if model_output.name not in ready:
            message = f"output '{model_output.name}' for ensemble '{name}' is not written"
            source = _unconnected_source(config, model_output.name, ready)
            if source != model_output.name:
                message += f": at least one of its depending tensors, '{source}', is not connected"
            raise InvalidConfig(message)
        outputs.add(model_output.name)
    for tensor, (_, consumers) in graph.items():
        if tensor not in outputs and (tensor not in ready or not consumers):
            raise InvalidConfig(f"ensemble tensor '{tensor}' is unused in ensemble '{name}'")


__all__ = ["validate_dynamic_batching", "validate_ensemble", "validate_sequence_batching"]
