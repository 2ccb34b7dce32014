"""`modelhost sagemaker`: the container entry of Triton's SageMaker image (its docker/sagemaker/serve script).

The script turns SAGEMAKER_* environment variables into tritonserver flags, picks the model to load and exits 1
on a model directory SageMaker cannot serve. `sagemaker_launch` does the same, without side effects, and returns
the `modelhost serve` arguments, the variables the server reads at run time, and notes on what modelhost leaves
out; `main` runs it. The facts the script establishes, flag by flag, are in the docstring of `sagemaker_launch`.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from modelhost.options import bool_or_none

SINGLE_MODEL_DIR = Path("/opt/ml/model")
MULTI_MODEL_DIR = Path("/tmp/sagemaker")  # a placeholder repository: MME models are registered one by one
INFERENCE_TYPES = ("infer", "generate", "generate_stream")
# The script's defaults for the python backend's shared memory (tritonserver's own are 1 MiB and 1 MiB).
SHM_DEFAULT_BYTE_SIZE = "16777216"  # 16 MiB
SHM_GROWTH_BYTE_SIZE = "1048576"  # 1 MiB


HELP = """\
usage: modelhost sagemaker [--dry-run] [serve options...]

Start the server as Triton's SageMaker container entry (docker/sagemaker/serve) does: the SageMaker API on
--sagemaker-port (SAGEMAKER_BIND_TO_PORT, default 8080), no HTTP API, models loaded explicitly. The command line
is built from the environment; serve options given here are appended after it (a later flag wins).

  --dry-run   print the `modelhost serve` command line (with the variables set for the server) and exit
  -h, --help  show this help and exit (`modelhost serve --help` lists the serve options)

Model repository: /opt/ml/model, whose single model directory, or SAGEMAKER_TRITON_DEFAULT_MODEL_NAME, is loaded
at startup; with SAGEMAKER_MULTI_MODEL=true, /tmp/sagemaker and models come through the SageMaker MME API.
Exits 1 if /opt/ml/model holds config.pbtxt itself, has no or several model directories and no default name,
or the default name is not one of them.

Variables (empty counts as unset):
  SAGEMAKER_MULTI_MODEL                         true: multi-model endpoint (MME)
  SAGEMAKER_BIND_TO_PORT                        --sagemaker-port
  SAGEMAKER_SAFE_PORT_RANGE                     --sagemaker-safe-port-range
  SAGEMAKER_TRITON_DEFAULT_MODEL_NAME           the model of /invocations, loaded at startup (single model)
  SAGEMAKER_TRITON_INFERENCE_TYPE               infer (default), generate or generate_stream
  SAGEMAKER_TRITON_OVERRIDE_PING_MODE           /ping checks ready or live (default: ready; MME: live)
  SAGEMAKER_TRITON_ALLOW_GRPC                   --allow-grpc (default false)
  SAGEMAKER_TRITON_GRPC_PORT                    --grpc-port
  SAGEMAKER_TRITON_ALLOW_METRICS                --allow-metrics (default false)
  SAGEMAKER_TRITON_METRICS_PORT                 --metrics-port
  SAGEMAKER_TRITON_THREAD_COUNT                 --sagemaker-thread-count (ignored by modelhost)
  SAGEMAKER_TRITON_BUFFER_MANAGER_THREAD_COUNT  --buffer-manager-thread-count (ignored by modelhost)
  SAGEMAKER_TRITON_LOG_VERBOSE                  --log-verbose (default true, i.e. 1)
  SAGEMAKER_TRITON_LOG_INFO, _LOG_WARNING, _LOG_ERROR   --log-info, --log-warning, --log-error
  SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE        --backend-config=python,shm-default-byte-size (default 16 MiB)
  SAGEMAKER_TRITON_SHM_GROWTH_BYTE_SIZE         --backend-config=python,shm-growth-byte-size (default 1 MiB)
  SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT         --model-load-gpu-limit <gpu>:<fraction> for each GPU
  SAGEMAKER_TRITON_ADDITIONAL_ARGS              more serve options, split at whitespace (quotes stay literal)
  SAGEMAKER_TRITON_TENSORFLOW_VERSION           --backend-config=tensorflow,version (2: the only one)
  SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING    left out: modelhost does not namespace model names
  MODELHOST_SAGEMAKER_MODEL_DIR                 modelhost only: use this directory instead of /opt/ml/model
  MODELHOST_SAGEMAKER_MODEL_ROOT                modelhost only: the MME model urls' root instead of /opt/ml/models
"""


@dataclass
class SageMakerLaunch:
    """What `modelhost sagemaker` runs."""

    argv: list[str]  # the arguments of `modelhost serve`, without "serve"
    environ: dict[str, str] = field(default_factory=dict)  # variables to set for the server process
    # For the operator: the script's own messages (MME mode, the model picked) and what was left out and why.
    notes: list[str] = field(default_factory=list)


class SageMakerEntryError(Exception):
    """A model directory or setting the script refuses (it exits 1): the script's message."""


def sagemaker_launch(
    environ: Mapping[str, str],
    *,
    model_dir: Path = SINGLE_MODEL_DIR,
    multi_model_dir: Path = MULTI_MODEL_DIR,
    gpu_count: int | None = None,
) -> SageMakerLaunch:
    """The `modelhost serve` launch that docker/sagemaker/serve would make of `environ`.

    Reads nothing but `environ`, the listing of `model_dir` and whether `model_dir/config.pbtxt` exists (and, only
    when SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT is set and `gpu_count` is None, the number of GPUs). Creating
    `multi_model_dir` (the script's `mkdir -p`) is left to the caller. Raises SageMakerEntryError where the script
    exits 1, in the script's order and words.

    As the script: a variable set to "" counts as unset; values are passed on as they are (modelhost serve checks
    them; --log-verbose takes true/false as 1/0, as tritonserver does). Unlike the script, a value is one
    argument even if it holds spaces, and nothing is glob-expanded; SAGEMAKER_TRITON_ADDITIONAL_ARGS is split at
    whitespace, without quote processing, as bash splits it.
    """

    def get(name: str) -> str | None:
        return environ.get(name) or None  # `[ -n "$NAME" ]`

    notes: list[str] = []
    multi_model = environ.get("SAGEMAKER_MULTI_MODEL") == "true"
    ping_mode = get("SAGEMAKER_TRITON_OVERRIDE_PING_MODE") or ("live" if multi_model else "ready")
    if multi_model:
        notes.append(f'Triton is running in SageMaker MME mode. Using Triton ping mode: "{ping_mode}"')
    repository = multi_model_dir if multi_model else model_dir
    argv = [
        "--allow-sagemaker=true",
        "--allow-http=false",
        "--model-control-mode=explicit",
        f"--model-repository={repository}",
    ]
    # As the script: namespacing on, unless the variable says otherwise (its value is passed as is).
    namespacing = get("SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING")  # its value checked last, as tritonserver
    argv.append(f"--model-namespacing={namespacing if namespacing is not None else 'true'}")

    def flag(option: str, variable: str, default: str | None = None) -> None:
        value = get(variable) or default
        if value is not None:
            argv.append(f"{option}={value}")

    flag("--sagemaker-port", "SAGEMAKER_BIND_TO_PORT")
    flag("--sagemaker-safe-port-range", "SAGEMAKER_SAFE_PORT_RANGE")
    flag("--allow-grpc", "SAGEMAKER_TRITON_ALLOW_GRPC", "false")
    flag("--allow-metrics", "SAGEMAKER_TRITON_ALLOW_METRICS", "false")
    flag("--metrics-port", "SAGEMAKER_TRITON_METRICS_PORT")
    flag("--grpc-port", "SAGEMAKER_TRITON_GRPC_PORT")
    flag("--buffer-manager-thread-count", "SAGEMAKER_TRITON_BUFFER_MANAGER_THREAD_COUNT")
    flag("--sagemaker-thread-count", "SAGEMAKER_TRITON_THREAD_COUNT")
    argv.append(f"--log-verbose={get('SAGEMAKER_TRITON_LOG_VERBOSE') or 'true'}")
    flag("--log-info", "SAGEMAKER_TRITON_LOG_INFO")
    flag("--log-warning", "SAGEMAKER_TRITON_LOG_WARNING")
    flag("--log-error", "SAGEMAKER_TRITON_LOG_ERROR")
    flag("--backend-config=python,shm-default-byte-size", "SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE",
         SHM_DEFAULT_BYTE_SIZE)  # fmt: skip
    flag("--backend-config=python,shm-growth-byte-size", "SAGEMAKER_TRITON_SHM_GROWTH_BYTE_SIZE",
         SHM_GROWTH_BYTE_SIZE)  # fmt: skip
    flag("--backend-config=tensorflow,version", "SAGEMAKER_TRITON_TENSORFLOW_VERSION")
    gpu_limit = get("SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT")
    if gpu_limit is not None:
        gpus = _gpu_count() if gpu_count is None else gpu_count
        for gpu in range(gpus):
            argv += ["--model-load-gpu-limit", f"{gpu}:{gpu_limit}"]
        if gpus == 0:
            notes.append(
                f"NOTE: SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT={gpu_limit} has no effect: no GPU found "
                "(the script, too, passes --model-load-gpu-limit once per GPU)."
            )
    additional = get("SAGEMAKER_TRITON_ADDITIONAL_ARGS")
    if additional is not None:
        argv += additional.split()

    environ_out = {"SAGEMAKER_TRITON_PING_MODE": ping_mode}
    if not multi_model and (model_dir / "config.pbtxt").is_file():
        raise SageMakerEntryError(
            "ERROR: Incorrect directory structure.\n       Model directory needs to contain the top level folder"
        )
    inference_type = get("SAGEMAKER_TRITON_INFERENCE_TYPE")
    if inference_type is not None and inference_type not in INFERENCE_TYPES:
        raise SageMakerEntryError(
            f"ERROR: Invalid SAGEMAKER_TRITON_INFERENCE_TYPE '{inference_type}'\n"
            "       Must be one of: infer, generate, generate_stream"
        )
    if not multi_model:
        model = _default_model(model_dir, get("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"), notes)
        argv.append(f"--load-model={model}")
        environ_out["SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"] = model
    if namespacing is not None and bool_or_none(namespacing) is None:
        # tritonserver itself refuses the value; modelhost's parser would too, with a less telling message.
        raise SageMakerEntryError(
            f"ERROR: Invalid SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING '{namespacing}' "
            "(passed as --model-namespacing: must be true or false)"
        )
    return SageMakerLaunch(argv=argv, environ=environ_out, notes=notes)


def _default_model(model_dir: Path, name: str | None, notes: list[str]) -> str:
    if name is not None:
        if not (model_dir / name).is_dir():  # `[ -d ]` follows links
            raise SageMakerEntryError(
                f"ERROR: Directory with provided SAGEMAKER_TRITON_DEFAULT_MODEL_NAME {name} does not exist"
            )
        return name
    directories = _model_directories(model_dir)
    if not directories:
        raise SageMakerEntryError("ERROR: No model found in model repository")
    if len(directories) > 1:
        raise SageMakerEntryError(
            "ERROR: More than 1 model directory found in model repository.\n"
            "       Either provide a single directory or set SAGEMAKER_TRITON_DEFAULT_MODEL_NAME to run the "
            "ensemble backend.\n"
            f"       Directories found in model repository: {' '.join(directories)}"
        )
    notes.append(
        "WARNING: No SAGEMAKER_TRITON_DEFAULT_MODEL_NAME provided.\n"
        f"         Starting with the only existing model directory {directories[0]}"
    )
    return directories[0]


def _model_directories(model_dir: Path) -> list[str]:
    """`find DIR -mindepth 1 -maxdepth 1 -type d`: hidden directories count, links to directories do not; a
    missing or unreadable DIR has none. Sorted (find lists them in directory order)."""
    try:
        entries = list(os.scandir(model_dir))
    except OSError:
        return []
    return sorted(entry.name for entry in entries if entry.is_dir(follow_symlinks=False))


def _gpu_count() -> int:
    from modelhost.host.devices import (
        gpu_count,  # the GPUs modelhost uses (the script counts `nvidia-smi -L`)
    )

    return gpu_count()


def command_line(launch: SageMakerLaunch, extra: Sequence[str] = ()) -> str:
    """The launch as one shell command line: the server's variables, then `modelhost serve ...`."""
    assignments = [f"{name}={shlex.quote(value)}" for name, value in launch.environ.items()]
    return " ".join([*assignments, shlex.join(["modelhost", "serve", *launch.argv, *extra])])


def main(argv: Sequence[str], serve: Callable[[list[str]], int]) -> int:
    """`modelhost sagemaker [--dry-run] [serve options...]`: returns the exit code. `serve` runs
    `modelhost serve` with its arguments (the cli passes it: this module does not import the cli)."""
    args = list(argv)
    if "-h" in args or "--help" in args:
        print(HELP, end="")
        return 0
    dry_run = "--dry-run" in args
    args = [arg for arg in args if arg != "--dry-run"]
    try:
        # MODELHOST_SAGEMAKER_MODEL_DIR: where /opt/ml/model is (tests, or a container that mounts it elsewhere).
        model_dir = Path(os.environ.get("MODELHOST_SAGEMAKER_MODEL_DIR") or SINGLE_MODEL_DIR)
        launch = sagemaker_launch(os.environ, model_dir=model_dir, multi_model_dir=MULTI_MODEL_DIR)
    except SageMakerEntryError as error:
        print(error, file=sys.stderr)
        return 1
    for note in launch.notes:
        print(note, file=sys.stderr)
    command = command_line(launch, args)
    if dry_run:
        print(command)
        return 0
    if os.environ.get("SAGEMAKER_MULTI_MODEL") == "true":
        try:
            MULTI_MODEL_DIR.mkdir(parents=True, exist_ok=True)  # the script's `mkdir -p`
        except OSError as error:
            print(f"WARNING: cannot create {MULTI_MODEL_DIR}: {error.strerror}", file=sys.stderr)
    os.environ.update(launch.environ)
    print(command, file=sys.stderr, flush=True)
    return serve([*launch.argv, *args])
