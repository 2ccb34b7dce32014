"""Building a TensorRT plan from an ONNX model with TensorRT's builder API (what `trtexec --onnx ...
--saveEngine ...` does), for `modelhost convert onnx-to-tensorrt`. Needs the tensorrt package and a GPU: a plan
is built for, and loads only with, the TensorRT version and GPU kind it was built on.
"""

from __future__ import annotations

import logging
from pathlib import Path

from modelhost.backends.tensorrt.adapter import RUNTIME, trt
from modelhost.backends.tensorrt.engine import EngineDescription, ProfileShapes, Shape
from modelhost.backends.tensorrt.shape_spec import check_against_network

log = logging.getLogger(__name__)


class BuildError(RuntimeError):
    pass


def build_plan(
    onnx_path: Path,
    profile: dict[str, ProfileShapes],
    *,
    fp16: bool = False,
    workspace_mib: int | None = None,
    version_compatible: bool = False,
) -> bytes:
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    if builder is None:
        raise BuildError("TensorRT could not create a builder (is a GPU visible to CUDA?)")
    network = builder.create_network(0)  # explicit batch: the only kind TensorRT 10+ builds
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise BuildError(f"TensorRT's ONNX parser refused {onnx_path}: {errors}")
    inputs: list[tuple[str, Shape]] = []
    for index in range(network.num_inputs):
        tensor = network.get_input(index)
        inputs.append((str(tensor.name), tuple(int(d) for d in tensor.shape)))
    check_against_network(profile, inputs)

    config = builder.create_builder_config()
    if profile:
        optimization_profile = builder.create_optimization_profile()
        for name, shapes in profile.items():
            optimization_profile.set_shape(name, shapes.min, shapes.opt, shapes.max)
        config.add_optimization_profile(optimization_profile)
    if workspace_mib is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_mib << 20)
    if fp16:
        if not hasattr(trt.BuilderFlag, "FP16"):
            raise BuildError(
                f"--fp16 needs TensorRT 10: TensorRT {trt.__version__} builds strongly typed networks, whose "
                "precision comes from the ONNX model; convert the model to FP16 first (for example with NVIDIA "
                "ModelOpt AutoCast) and build it without --fp16"
            )
        config.set_flag(trt.BuilderFlag.FP16)
    if version_compatible:
        config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise BuildError("TensorRT could not build the engine (its log above says why)")
    return bytes(serialized)


def tensorrt_version() -> str:
    return str(trt.__version__)


def describe_plan(plan: bytes, *, version_compatible: bool = False) -> EngineDescription:
    """The description of a freshly built plan (for the config.pbtxt written beside it), on GPU 0."""
    return RUNTIME.deserialize(plan, 0, version_compatible=version_compatible).description


__all__ = ["BuildError", "build_plan", "describe_plan", "tensorrt_version"]
