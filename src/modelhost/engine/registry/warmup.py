"""Model warmup (`model_warmup` in the config): synthetic requests run on every instance before the model is READY.

As in Triton: each sample runs `count` times (at least once) on each instance, with `batch_size` rows for a
batching model; inputs are zeros, random values, or the raw contents of a file under `<model>/warmup/`
(row-major, little-endian; BYTES elements as a 4-byte length and the bytes). The answers are discarded; a sample
that fails fails the load, with its reason.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from modelhost.backends.api import Arrays, ModelInstance
from modelhost.datatypes import CONFIG_TO_WIRE, WIRE_TO_NUMPY
from modelhost.errors import ModelConfigError
from modelhost.io_specs import input_specs
from modelhost.tensor_codec import array_from_raw

log = logging.getLogger("modelhost.warmup")


def _fail(model: str, sample: str, why: str) -> ModelConfigError:
    return ModelConfigError(f"model '{model}' warmup sample '{sample}': {why}")


def _data(
    model: str, sample: str, name: str, spec: Any, shape: list[int], model_dir: Path, rng: np.random.Generator
) -> npt.NDArray[Any]:
    type_name = spec.DESCRIPTOR.fields_by_name["data_type"].enum_type.values_by_number[spec.data_type].name
    datatype = CONFIG_TO_WIRE.get(type_name)
    if datatype is None:
        raise _fail(model, sample, f"input '{name}' has no valid data_type")
    dtype = WIRE_TO_NUMPY[datatype]
    which = spec.WhichOneof("input_data_type")
    count = int(np.prod(shape)) if shape else 1
    if which == "input_data_file":
        path = (model_dir / "warmup" / spec.input_data_file).resolve()
        if not path.is_relative_to((model_dir / "warmup").resolve()) or not path.is_file():
            raise _fail(
                model,
                sample,
                f"input '{name}': file '{spec.input_data_file}' not found in {model_dir}/warmup",
            )
        return array_from_raw(name, datatype, shape, path.read_bytes())
    if datatype == "BYTES":
        if which == "random_data":
            values = [bytes(rng.integers(32, 127, size=8, dtype=np.uint8)) for _ in range(count)]
        else:
            values = [b""] * count
        array = np.empty(count, dtype=object)
        array[:] = values
        return array.reshape(shape)
    if which == "random_data":
        if dtype.kind == "f":
            return rng.random(shape).astype(dtype)
        if dtype.kind == "b":
            return rng.integers(0, 2, size=shape).astype(dtype)
        return rng.integers(0, 100, size=shape).astype(dtype)
    return np.zeros(shape, dtype=dtype)


def warmup_inputs(config: Any, sample: Any, model_dir: Path, rng: np.random.Generator) -> Arrays:
    """The model-shaped inputs of one warmup sample."""
    model = config.name
    specs = input_specs(config)
    batching = config.max_batch_size > 0
    if batching and not 1 <= sample.batch_size <= config.max_batch_size:
        raise _fail(
            model, sample.name, f"batch_size {sample.batch_size} must be in [1, {config.max_batch_size}]"
        )
    arrays: Arrays = {}
    for name, given in sample.inputs.items():
        spec = specs.get(name)
        dims = [int(d) for d in given.dims]
        if any(d < 0 for d in dims):
            raise _fail(model, sample.name, f"input '{name}' needs concrete dims, got {dims}")
        shape = ([int(sample.batch_size)] if batching else []) + dims
        data = _data(model, sample.name, name, given, shape, model_dir, rng)
        if spec is None:
            # Not one of the config's inputs: passed to the model as it is, as Triton passes such a warmup input
            # (a control or state input, or one a python model reads on its own).
            arrays[name] = data
            continue
        if data.dtype != spec.dtype:
            raise _fail(
                model, sample.name, f"input '{name}' data_type does not match the model's {spec.datatype}"
            )
        if spec.reshape is not None:
            data = data.reshape(([int(sample.batch_size)] if batching else []) + list(spec.reshape))
        arrays[name] = data
    missing = [n for n, s in specs.items() if not s.optional and n not in arrays]
    if missing:
        raise _fail(model, sample.name, f"missing input(s) {missing}")
    return arrays


def run_warmup(config: Any, model_dir: Path, instances: list[ModelInstance]) -> None:
    """Run every warmup sample on every instance; raise ModelConfigError naming the sample that failed."""
    if not config.model_warmup:
        return
    rng = np.random.default_rng(0)
    outputs = [o.name for o in config.output]
    for sample in config.model_warmup:
        if config.max_batch_size > 0 and sample.batch_size == 0:
            continue  # Triton skips samples with no rows
        inputs = warmup_inputs(config, sample, model_dir, rng)
        for instance in instances:
            # A request-level instance (python) takes the sample as requests, from this loading thread.
            run = getattr(instance, "warm_up", None) or instance.execute
            for _ in range(max(1, int(sample.count))):
                try:
                    run(inputs, outputs)
                except Exception as e:  # ModelhostError from the backend, or a runtime fault
                    raise _fail(config.name, sample.name, f"failed on instance {instance.name}: {e}") from e
        log.info(
            "model '%s': warmup sample '%s' ran on %d instance(s)", config.name, sample.name, len(instances)
        )
