"""The `modelhost` command: its subcommands (serve, perf, tune, sagemaker, convert, ray, compatibility), and the
`tritonserver` command installed with it. `modelhost serve` takes tritonserver's flags (serve_args.py)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import modelhost
from modelhost.cli.errors import USAGE_ERROR, CliError, CliParser
from modelhost.cli.flags import FLAGS, FLAGS_BY_NAME, SECTIONS
from modelhost.cli.serve_args import parse_serve
from modelhost.observability.logs import LOGGER_NAME, configure_logging

log = logging.getLogger(f"{LOGGER_NAME}.cli")


def bundled_examples() -> Path:
    """The example model repository shipped inside the package, served when no repository is given."""
    return Path(modelhost.__file__).parent / "examples"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(args)
    except CliError as error:
        print(f"modelhost: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        return 130  # 128 + SIGINT, as shells report it


def tritonserver_main(argv: Sequence[str] | None = None) -> int:
    """The `tritonserver` command installed with modelhost: tritonserver's command line unchanged, so that a
    manifest, script or runtime that calls `tritonserver --model-repository=...` runs modelhost once the image
    is swapped. It is `modelhost serve`, less the bundled examples: as tritonserver, no repository is an
    error."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return _serve(args, require_repository=True)
    except CliError as error:
        print(f"tritonserver: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        return 130


def _main(args: list[str]) -> int:
    if args and args[0] == "serve":
        return _serve(args[1:])
    if args and args[0] == "sagemaker":
        from modelhost.cli.sagemaker import main as sagemaker_main  # the SageMaker container's `serve`

        return sagemaker_main(args[1:], lambda serve_args: _main(["serve", *serve_args]))
    if args and args[0] == "perf":
        from modelhost.perf import main as perf_main  # perf_analyzer's job; none of the server

        return perf_main(args[1:])
    if args and args[0] == "tune":
        from modelhost.tune import main as tune_main  # Model Analyzer's job, on perf's load engine

        return tune_main(args[1:])
    if args and args[0] == "convert":
        return _convert_model(args[1:])
    if args and args[0] == "ray":
        from modelhost.cli.ray import main as ray_main  # a repository on a Ray cluster (docs/ray.md)

        return ray_main(args[1:])
    if args and args[0] == "compatibility":
        return _compatibility(args[1:])
    if args and args[0].startswith("--") and args[0][2:].partition("=")[0] in FLAGS_BY_NAME:
        # Someone used to `tritonserver --model-repository=...`.
        raise CliError(f"{args[0]} is an option of the serve command: modelhost serve {' '.join(args)}")
    parser = _top_parser()
    try:
        parser.parse_args(args)
    except SystemExit as exit_:  # --help and --version end here
        return _exit_code(exit_)
    parser.print_help(sys.stderr)  # no command given
    return USAGE_ERROR


def _serve(argv: Sequence[str], require_repository: bool = False) -> int:
    try:
        options, notes = parse_serve(argv)
    except SystemExit as exit_:  # --help ends here
        return _exit_code(exit_)
    if not options.model_repositories and require_repository:
        raise CliError("--model-repository must be specified")
    if not options.model_repositories:
        examples = bundled_examples()
        if not examples.is_dir():
            raise CliError(f"no --model-repository given and no bundled examples at {examples}")
        options = dataclasses.replace(options, model_repositories=[str(examples)])
        notes.append(
            (logging.INFO, f"No --model-repository given: serving the bundled examples in {examples}")
        )
    try:
        configure_logging(options.log_options())
    except OSError as error:
        raise CliError(f"cannot open --log-file {options.log_file}: {error.strerror}") from error
    for level, message in notes:
        log.log(level, message)
    # Imported here: the parser and its tests need none of the server.
    from modelhost.app import run_server

    return run_server(options)


def _exit_code(exit_: SystemExit) -> int:
    return exit_.code if isinstance(exit_.code, int) else 0


def _top_parser() -> argparse.ArgumentParser:
    parser = CliParser(
        prog="modelhost",
        description="A model inference server, drop-in compatible with NVIDIA Triton Inference Server.",
        epilog="Run `modelhost serve --help` for the server's options (tritonserver's flags).",
        allow_abbrev=False,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"modelhost {modelhost.__version__} "
        f"(compatible with Triton Inference Server {modelhost.TRITON_COMPAT_VERSION})",
    )
    commands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    commands.add_parser("serve", help="Run the server on HTTP, GRPC and metrics ports (8000, 8001, 8002).")
    commands.add_parser("perf", help="Measure a model's throughput and latency, as perf_analyzer does.")
    commands.add_parser(
        "tune",
        help="Find the model configuration that serves a model best, as Model Analyzer does (docs/tune.md).",
    )
    commands.add_parser(
        "sagemaker",
        help="Run the server as a SageMaker container does (Triton's `serve` script), from SAGEMAKER_* variables.",
    )
    commands.add_parser(
        "convert", help="Convert a model for a backend: modelhost convert onnx-to-tensorrt ..."
    )
    commands.add_parser(
        "ray", help="Serve a model repository on a Ray cluster, each model scaling on its own (docs/ray.md)."
    )
    commands.add_parser(
        "compatibility", help="Print what of Triton modelhost serves, item by item (docs/compatibility.md)."
    )
    return parser


def _compatibility(args: list[str]) -> int:
    """`modelhost compatibility`: docs/compatibility.md, written from the code."""
    if args:
        raise CliError("compatibility takes no arguments: modelhost compatibility > docs/compatibility.md")
    from modelhost.compatibility.page import markdown

    sys.stdout.write(markdown(FLAGS, SECTIONS))
    return 0


def _convert_model(args: list[str]) -> int:
    """`modelhost convert <converter> ...`: the converters the backends provide (backends/registry.py)."""
    from modelhost.backends.registry import MissingExtra, converters, run_converter

    available = converters()
    if not args or args[0] in ("-h", "--help"):
        print("usage: modelhost convert CONVERTER [options]\n\nconverters:")
        for name, description in available.items():
            print(f"  {name:<20} {description}")
        print("\n`modelhost convert CONVERTER --help` describes its options.")
        return 0 if args else USAGE_ERROR
    if args[0] not in available:
        raise CliError(f"unknown converter '{args[0]}' (converters: {', '.join(available)})")
    try:
        return run_converter(args[0], args[1:])
    except MissingExtra as e:
        raise CliError(str(e)) from None


if __name__ == "__main__":
    sys.exit(main())
