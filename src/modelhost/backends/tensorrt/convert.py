"""`modelhost convert onnx-to-tensorrt`: build a TensorRT plan from an ONNX model, optionally with its config.

    modelhost convert onnx-to-tensorrt --onnx model.onnx \\
        --min-shapes input:1x3x224x224 --opt-shapes input:8x3x224x224 --max-shapes input:32x3x224x224 \\
        --output repo/resnet/1/ --write-config

What `trtexec --onnx=... --saveEngine=... --minShapes=... --optShapes=... --maxShapes=...` does, with
trtexec's shape syntax, run on the host (TensorRT version and GPU kind) that will serve the plan. The plan goes
to --output (a file, or a directory that gets model.plan), by default model.plan beside the ONNX file. With
--write-config, a config.pbtxt is written too: into the model directory when the plan is in a Triton version
directory (<model>/<version>/), else beside the plan; its inputs, outputs and max_batch_size (the profile's
largest batch) are what auto-complete would find in the engine.

Exit status: 0 done, 1 the build failed, 2 a usage error or the tensorrt package is missing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from google.protobuf import text_format  # type: ignore[import-untyped]
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from modelhost.backends.tensorrt.autocomplete import autocomplete_from_engine
from modelhost.backends.tensorrt.engine import EngineDescription, ProfileShapes, shape_string
from modelhost.backends.tensorrt.shape_spec import ShapeSpecError, build_profile
from modelhost.config.constants import TENSORRT_FILENAME, TENSORRT_PLATFORM
from modelhost.errors import ModelhostError

PROG = "modelhost convert onnx-to-tensorrt"
USAGE_ERROR = 2
BUILD_FAILED = 1
MISSING_TENSORRT = (
    f"{PROG} needs the Python package 'tensorrt', which is not installed; install it with: "
    "pip install 'modelhost[tensorrt]'"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Build a TensorRT plan (model.plan) from an ONNX model, as trtexec does, on the host that "
        "will serve it.",
    )
    parser.add_argument("--onnx", required=True, type=Path, help="The ONNX model to convert.")
    parser.add_argument(
        "--output",
        help="Where to write the plan: a file, or a directory that gets model.plan (default: model.plan beside "
        "the ONNX file).",
    )
    for bound in ("min", "opt", "max"):
        parser.add_argument(
            f"--{bound}-shapes",
            metavar="SPEC",
            help=f"The {bound} shapes of the optimization profile, in trtexec syntax: "
            "name:1x3x224x224[,name2:...].",
        )
    parser.add_argument("--fp16", action="store_true", help="Allow FP16 kernels (TensorRT 10 only).")
    parser.add_argument(
        "--workspace", type=int, metavar="MIB", help="The builder's workspace memory limit in MiB."
    )
    parser.add_argument(
        "--version-compatible",
        action="store_true",
        help="Build a version-compatible plan (serve it with --backend-config=tensorrt,version-compatible=true).",
    )
    parser.add_argument(
        "--write-config",
        action="store_true",
        help="Also write the model's config.pbtxt, with the profile's max batch.",
    )
    parser.add_argument("--force", action="store_true", help="Overwrite an existing config.pbtxt.")
    return parser


def plan_path(onnx: Path, output: str | None) -> Path:
    """Where the plan goes: --output as a file, or model.plan in --output as a directory, or beside the ONNX."""
    if output is None:
        return onnx.with_name(TENSORRT_FILENAME)
    target = Path(output)
    if target.is_dir() or output.endswith(("/", "\\")):
        return target / TENSORRT_FILENAME
    return target


def config_location(plan: Path) -> tuple[Path, str]:
    """(config.pbtxt path, model name): a plan in a version directory (<model>/<digits>/) configures <model>."""
    parent = plan.resolve().parent
    model_dir = parent.parent if parent.name.isdigit() else parent
    return model_dir / "config.pbtxt", model_dir.name


def plan_config(model_name: str, plan_filename: str, engine: EngineDescription) -> ModelConfig:
    """The config of a freshly built plan: what auto-complete would find in the engine, on a GPU instance."""
    config = ModelConfig(name=model_name, platform=TENSORRT_PLATFORM)
    if plan_filename != TENSORRT_FILENAME:
        config.default_model_filename = plan_filename
    config.instance_group.add(kind=ModelInstanceGroup.KIND_GPU, count=1)
    autocomplete_from_engine(config, engine, model_name)
    return config


def config_text(config: ModelConfig) -> str:
    return str(text_format.MessageToString(config))


def _describe_profile(profile: dict[str, ProfileShapes]) -> str:
    if not profile:
        return "static shapes"
    return ", ".join(
        f"{name} {shape_string(s.min)}..{shape_string(s.max)} (opt {shape_string(s.opt)})"
        for name, s in profile.items()
    )


def main(argv: list[str]) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, or a usage error argparse has printed
        return exit_.code if isinstance(exit_.code, int) else USAGE_ERROR

    def usage(message: str) -> int:
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return USAGE_ERROR

    onnx: Path = args.onnx
    if not onnx.is_file():
        return usage(f"no ONNX model at {onnx}")
    if args.workspace is not None and args.workspace <= 0:
        return usage("--workspace must be a positive number of MiB")
    try:
        profile = build_profile(args.min_shapes, args.opt_shapes, args.max_shapes)
    except ShapeSpecError as e:
        return usage(str(e))
    plan = plan_path(onnx, args.output)
    config_file, model_name = config_location(plan)
    if args.write_config and config_file.exists() and not args.force:
        return usage(f"{config_file} exists; pass --force to overwrite it")

    try:
        # Imported here: the usage checks above work without TensorRT, and its absence has its own message.
        from modelhost.backends.tensorrt import builder
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] == "tensorrt":
            print(MISSING_TENSORRT, file=sys.stderr)
            return USAGE_ERROR
        raise

    try:
        data = builder.build_plan(
            onnx,
            profile,
            fp16=args.fp16,
            workspace_mib=args.workspace,
            version_compatible=args.version_compatible,
        )
    except (builder.BuildError, ShapeSpecError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return BUILD_FAILED
    plan.parent.mkdir(parents=True, exist_ok=True)
    plan.write_bytes(data)
    print(f"wrote {plan} (TensorRT {builder.tensorrt_version()}, {_describe_profile(profile)})")

    if args.write_config:
        try:
            engine = builder.describe_plan(data, version_compatible=args.version_compatible)
            config = plan_config(model_name, plan.name, engine)
        except ModelhostError as e:
            print(f"{PROG}: the plan was written but its config was not: {e}", file=sys.stderr)
            return BUILD_FAILED
        except Exception as e:  # PlanLoadError, CudaError
            print(
                f"{PROG}: the plan was written but cannot be read back for its config: {e}", file=sys.stderr
            )
            return BUILD_FAILED
        config_file.write_text(config_text(config))
        print(f"wrote {config_file} (max_batch_size {config.max_batch_size})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
