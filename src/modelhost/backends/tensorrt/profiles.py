"""Optimization profiles: which ones an instance uses, the batch they allow, and which one serves a request.

An engine built with dynamic shapes has one or more optimization profiles, each a min/opt/max shape per input.
As in Triton's tensorrt_backend, an instance group names its profiles in `instance_group.profile` (default:
profile 0) and each instance keeps one execution context per profile; a batch runs on the profile that accepts
its shapes and is closest to that profile's `opt` shapes (the Manhattan distance Triton uses).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from modelhost.backends.tensorrt.engine import EngineDescription, EngineTensor, Shape
from modelhost.errors import BackendInvalidArgument, ModelConfigError


def parse_profiles(group: Any) -> list[int]:
    """The profile indices of an instance group, in order and without repeats; [0] when it names none.

    Config validation already refused entries that are not non-negative integers."""
    indices: list[int] = []
    for text in group.profile:
        index = int(text)
        if index not in indices:
            indices.append(index)
    return indices or [0]


def instance_profiles(group: Any, num_profiles: int, instance_name: str) -> list[int]:
    """The profiles of one instance of `group`; an index the engine lacks fails the load (Triton's wording)."""
    indices = parse_profiles(group)
    for index in indices:
        if index >= num_profiles:
            raise ModelConfigError(
                f"Can not set the specified optimization profile {index}[{index}] for {instance_name}. "
                f"Expected optimization profile index range 0-{num_profiles - 1}"
            )
    return indices


def selected_profiles(config: Any, num_profiles: int, model_name: str) -> list[int]:
    """Every profile some instance group of the model uses (Triton's GetProfileIndices for auto-complete)."""
    indices: set[int] = set()
    for group in config.instance_group:
        for text in group.profile:
            index = int(text)
            if index >= num_profiles:
                raise ModelConfigError(
                    f"unable to autofill for '{model_name}', configuration specified invalid profile {text} . "
                    f"Number of profiles supported by TensorRT engine: {num_profiles}"
                )
            indices.add(index)
    return sorted(indices) or [0]


def _batching_inputs(engine: EngineDescription) -> list[EngineTensor]:
    return [t for t in engine.inputs if not t.is_shape_tensor]


def profile_max_batch(engine: EngineDescription, profile: int) -> int:
    """The largest batch a profile takes: the smallest dim 0 among the max shapes of the inputs (0 when some
    input has no dimension at all, so that no batch dimension exists)."""
    smallest: int | None = None
    for tensor in _batching_inputs(engine):
        max_shape = tensor.profiles[profile].max if profile < len(tensor.profiles) else tensor.shape
        first = max_shape[0] if max_shape else 0
        smallest = first if smallest is None else min(smallest, first)
    return max(smallest or 0, 0)


def engine_max_batch(engine: EngineDescription, profiles: Iterable[int]) -> int:
    """The max batch size of the engine over the profiles the model uses: the largest of the profiles' own
    (Triton's GetMaxSupportedBatchSize: a batch runs on whichever of an instance's profiles accepts it)."""
    return max((profile_max_batch(engine, p) for p in profiles), default=0)


# -- requests ------------------------------------------------------------------------------------------------


def dimension_error(shape: Sequence[int], tensor: EngineTensor, profile: int) -> str | None:
    """Why `shape` is outside the profile's range for this input (Triton's ValidateDimension), or None."""
    bounds = tensor.profiles[profile] if profile < len(tensor.profiles) else None
    low = bounds.min if bounds is not None else tensor.shape
    high = bounds.max if bounds is not None else tensor.shape
    if len(shape) != len(high):
        return f"model expected {len(high)} dimensions but received {len(shape)} dimensions"
    for i, (size, lo, hi) in enumerate(zip(shape, low, high, strict=True)):
        if (lo >= 0 and size < lo) or (hi >= 0 and size > hi):
            return (
                f"model expected the shape of dimension {i} to be between {lo} and {hi} but received {size}"
            )
    return None


def _distance(shapes: Mapping[str, Shape], engine: EngineDescription, profile: int) -> int:
    total = 0
    for name, shape in shapes.items():
        tensor = engine.tensor(name)
        if tensor is None or profile >= len(tensor.profiles):
            continue
        total += sum(abs(o - s) for o, s in zip(tensor.profiles[profile].opt, shape, strict=False))
    return total


def _profile_errors(shapes: Mapping[str, Shape], engine: EngineDescription, profile: int) -> list[str]:
    errors = []
    for name, shape in shapes.items():
        tensor = engine.tensor(name)
        if tensor is None or not tensor.is_input or tensor.is_shape_tensor:
            continue
        error = dimension_error(shape, tensor, profile)
        if error is not None:
            errors.append(f"input '{name}': {error}")
    return errors


def choose_profile(
    engine: EngineDescription, profiles: Sequence[int], shapes: Mapping[str, Shape], instance_name: str
) -> int:
    """The profile a batch with these input shapes runs on; a 400 naming the input and the allowed range when
    no profile of the instance accepts them (TensorRT itself would refuse them with a less clear error)."""
    if len(profiles) == 1:
        for name, shape in shapes.items():
            tensor = engine.tensor(name)
            if tensor is None or not tensor.is_input or tensor.is_shape_tensor:
                continue
            error = dimension_error(shape, tensor, profiles[0])
            if error is not None:
                raise BackendInvalidArgument(
                    f"request specifies invalid shape for input '{name}' for {instance_name}. "
                    f"Error details: {error}"
                )
        return profiles[0]
    best: tuple[int, int] | None = None
    refusals: list[str] = []
    for profile in profiles:
        errors = _profile_errors(shapes, engine, profile)
        if errors:
            refusals.append(f"profile {profile}: {'; '.join(errors)}")
            continue
        distance = _distance(shapes, engine, profile)
        if best is None or distance < best[0]:
            best = (distance, profile)
    if best is None:
        listed = " ".join(f"{p}[{p}]" for p in profiles)
        raise BackendInvalidArgument(
            f"failed to find any Optimization Profile among [{listed}] of {instance_name} to support the "
            f"requested dimensions: {' | '.join(refusals)}"
        )
    return best[1]


__all__ = [
    "choose_profile",
    "dimension_error",
    "engine_max_batch",
    "instance_profiles",
    "parse_profiles",
    "profile_max_batch",
    "selected_profiles",
]
