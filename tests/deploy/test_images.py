"""The container images (deploy/docker): their Dockerfiles, entrypoint and healthcheck, and the replay of their
install steps and start (deploy/docker/replay.py), which builds the CPU image's venv and runs its server."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from deploy.wheelhouse import pip_environment, wheelhouse
from e2e.server_process import running_server

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "deploy" / "docker"
EXAMPLES = ROOT / "src" / "modelhost" / "examples"
DOCKERFILES = {"cpu": DOCKER / "Dockerfile", "gpu": DOCKER / "Dockerfile.gpu"}


def _load_replay() -> ModuleType:
    spec = importlib.util.spec_from_file_location("modelhost_image_replay", DOCKER / "replay.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


replay = _load_replay()


def _run_replay(
    tmp: Path, *args: str, timeout: float = 600, env: dict[str, str] | None = None
) -> dict[str, object]:
    """Runs the replay script as a user would; its summary. Its output is shown only when it fails."""
    summary, log = tmp / "summary.json", tmp / "replay.log"
    with open(log, "wb") as out:
        result = subprocess.run(
            [sys.executable, str(DOCKER / "replay.py"), "--summary", str(summary), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            env=env,
        )
    assert result.returncode == 0, log.read_text(errors="replace")[-8000:]
    loaded: dict[str, object] = json.loads(summary.read_text())
    return loaded


# --- the Dockerfiles, parsed as the replay parses them -----------------------------------------------------


@pytest.mark.parametrize("variant", sorted(DOCKERFILES))
def test_dockerfile_runs_the_server_as_a_container_should(variant: str) -> None:
    image = replay.Image.load(
        DOCKERFILES[variant], {}
    )  # raises on a shell-form ENTRYPOINT, CMD or HEALTHCHECK
    final = image.dockerfile.final
    assert image.entrypoint == ["/opt/modelhost/bin/modelhost-entrypoint"]
    assert image.cmd == ["modelhost", "serve"]
    assert image.health.command == [
        "/opt/modelhost/bin/python",
        "/opt/modelhost/bin/modelhost-healthcheck.py",
    ]
    assert image.health.start_period_s >= 60  # models load before the first failure counts
    assert image.user == (1000, 1000)  # numeric, so that Kubernetes' runAsNonRoot can check it
    assert {8000, 8001, 8002, 8080} <= image.exposed
    assert image.roots == ["/opt/modelhost"]  # the final stage copies the venv alone: no source, no pip cache
    env = replay.image_env(final, {"PATH": "/usr/bin"})
    assert env["PATH"] == "/opt/modelhost/bin:/usr/bin"
    assert env["PYTHONUNBUFFERED"] == "1" and env["PYTHONDONTWRITEBYTECODE"] == "1"
    labels = dict(replay._pairs(" ".join(i.args for i in final.all("LABEL"))))
    oci = ("title", "description", "version", "revision", "licenses")
    assert {f"org.opencontainers.image.{name}" for name in oci} <= set(labels)
    # SageMaker refuses a multi-model endpoint on an image without the first, and ignores SAGEMAKER_BIND_TO_PORT
    # without the second (docs/deploy/sagemaker.md).
    assert labels["com.amazonaws.sagemaker.capabilities.multi-models"] == "true"
    assert labels["com.amazonaws.sagemaker.capabilities.accept-bind-to-port"] == "true"
    # One install script for every step, the venv step in the build stage with the variant's name.
    run = replay.venv_run(image.build_stage)
    assert f"install.sh venv {variant} " in run.args
    assert all("install.sh" in r.args for stage in image.dockerfile.stages for r in stage.all("RUN"))


def test_base_images_and_default_extras() -> None:
    cpu = replay.Image.load(DOCKERFILES["cpu"], {})
    gpu = replay.Image.load(DOCKERFILES["gpu"], {})
    assert replay.base_image(cpu.dockerfile, cpu.dockerfile.final, {}) == "python:3.11-slim"
    assert "cudnn-runtime-ubuntu24.04" in replay.base_image(gpu.dockerfile, gpu.dockerfile.final, {})
    # The extras every bundled example needs, and gcs for the Helm chart's gs:// repositories.
    assert replay.stage_args(cpu.dockerfile, cpu.build_stage, {})["EXTRAS"] == "torch,openvino,fil,gcs"
    assert replay.stage_args(cpu.dockerfile, cpu.build_stage, {"EXTRAS": ""})["EXTRAS"] == ""
    gpu_extras = replay.stage_args(gpu.dockerfile, gpu.build_stage, {})["EXTRAS"].split(",")
    assert {"torch", "tensorrt", "openvino", "fil", "gcs"} <= set(gpu_extras)
    # The image pins its TensorRT, and the KServe runtime declares that major for the tensorrt format.
    tensorrt = replay.stage_args(gpu.dockerfile, gpu.build_stage, {})["TENSORRT_VERSION"]
    runtime = yaml.safe_load((ROOT / "deploy" / "kserve" / "clusterservingruntime.yaml").read_text())
    declared = {f["version"] for f in runtime["spec"]["supportedModelFormats"] if f["name"] == "tensorrt"}
    assert declared == {tensorrt.split(".")[0]}


def test_parser_refuses_shell_form_and_root(tmp_path: Path) -> None:
    text = DOCKERFILES["cpu"].read_text()
    shell_form = text.replace(
        'ENTRYPOINT ["/opt/modelhost/bin/modelhost-entrypoint"]',
        "ENTRYPOINT /opt/modelhost/bin/modelhost-entrypoint",
    )
    as_root = text.replace("USER 1000:1000", "USER 0")
    for name, changed in {"shell": shell_form, "root": as_root}.items():
        assert changed != text
        (tmp_path / name).write_text(changed)
    with pytest.raises(replay.ReplayError, match="not exec form"):
        replay.Image.load(tmp_path / "shell", {})
    with pytest.raises(replay.ReplayError, match="USER is root"):
        replay.check_image(replay.Image.load(tmp_path / "root", {}))


def test_build_context_holds_what_the_install_needs() -> None:
    rules = replay.dockerignore_rules(ROOT)
    for needed in ("pyproject.toml", "README.md", "src/modelhost/cli/main.py", "deploy/docker/install.sh"):
        assert not replay.ignored(needed, rules), needed
    assert not replay.ignored("src/modelhost/examples/simple_ensemble/1/.keep", rules)
    for left_out in (
        ".venv/bin/python",
        ".git/HEAD",
        "tests/conftest.py",
        "src/modelhost/cli/__pycache__/main.pyc",
    ):
        assert replay.ignored(left_out, rules), left_out


# --- the entrypoint and the healthcheck ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "runs"),
    [
        ([], "modelhost serve"),
        (["modelhost", "serve"], "modelhost serve"),  # the CMD
        (["serve"], "modelhost sagemaker"),  # SageMaker's `docker run IMAGE serve`
        (["serve", "--log-verbose=1"], "modelhost sagemaker --log-verbose=1"),
        (
            ["--model-repository=/models", "--http-port=9000"],
            "modelhost serve --model-repository=/models --http-port=9000",
        ),
        (["-h"], "modelhost serve -h"),
        (["echo", "hello"], "hello"),  # anything else is run as given
    ],
)
def test_entrypoint_maps_arguments(tmp_path: Path, args: list[str], runs: str) -> None:
    # `modelhost` on PATH (as the image's ENV PATH puts it) records how the entrypoint ran it.
    stub = tmp_path / "modelhost"
    stub.write_text('#!/bin/sh\necho "modelhost $*"\n')
    stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        [str(DOCKER / "entrypoint.sh"), *args], env=env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == runs


def _healthcheck(pid: int, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, **(env or {}), "MODELHOST_HEALTHCHECK_PID": str(pid)}
    return subprocess.run(
        [sys.executable, str(DOCKER / "healthcheck.py")],
        env=environment,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_healthcheck_follows_the_servers_flags(tmp_path: Path) -> None:
    """The port comes from the server's own command line (here not 8000), read with modelhost's parser."""
    shutil.copytree(EXAMPLES / "simple", tmp_path / "models" / "simple")
    with running_server([tmp_path / "models"], tmp_path / "server.log") as server:
        assert server.http_port != 8000
        healthy = _healthcheck(server.process.pid)
        assert healthy.returncode == 0, healthy.stderr
        # A process that is not a modelhost server (this one) is unhealthy, with the reason.
        other = _healthcheck(os.getpid())
        assert other.returncode == 1 and "not a modelhost server" in other.stderr
        # Without a PID named, PID 1 is taken, and where PID 1 is an init (tini, `docker run --init`; here this
        # machine's init), the modelhost server process is found instead.
        assert _healthcheck_module().find_server(None)[0] in ("serve", "sagemaker")
    stopped = _healthcheck(server.process.pid)
    assert stopped.returncode == 1


def _healthcheck_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("modelhost_image_healthcheck", DOCKER / "healthcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the replays ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cpu_replay(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The CPU image replayed once: its venv built from this tree, then `docker run IMAGE` and `... serve`.
    TORCH_INDEX_URL= : download.pytorch.org is out of reach here; this host's pip configuration (find-links
    /opt/wheels) supplies the same torch 2.13.0+cpu wheel, and install.sh fails if a CUDA torch came instead.
    The venv step's pip installs from a local wheelhouse alone (tests/deploy/wheelhouse.py: built with this
    host's pip configuration once, reused by later runs), not resolving against the index each time."""
    cpu = replay.Image.load(DOCKERFILES["cpu"], {})
    extras = replay.stage_args(cpu.dockerfile, cpu.build_stage, {})["EXTRAS"]
    env = pip_environment(wheelhouse(extras))
    return _run_replay(tmp_path_factory.mktemp("cpu-replay"), "--build-arg", "TORCH_INDEX_URL=", env=env)


def test_cpu_image_serves_every_bundled_example(cpu_replay: dict[str, object]) -> None:
    default = cpu_replay["runs"]["default"]  # type: ignore[index]
    bundled = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
    assert default["models_ready"] == bundled
    assert default["exit_code"] == 0  # SIGTERM, as `docker stop` sends it, stops it cleanly
    assert cpu_replay["build_args"] == {"EXTRAS": "torch,openvino,fil,gcs", "TORCH_INDEX_URL": ""}


def test_cpu_image_serve_is_the_sagemaker_entry(cpu_replay: dict[str, object]) -> None:
    sagemaker = cpu_replay["runs"]["sagemaker"]  # type: ignore[index]
    assert sagemaker["exit_code"] == 0


def test_cpu_image_runs_kserve_tritonserver_command_line(cpu_replay: dict[str, object]) -> None:
    """`tritonserver` is on the image's PATH: KServe's Triton runtime's own container args, after the image's
    entrypoint, serve and answer (the replay infers on `simple` and checks gRPC listens)."""
    kserve = cpu_replay["runs"]["kserve"]  # type: ignore[index]
    assert kserve["exit_code"] == 0
    (runtime,) = yaml.safe_load_all((ROOT / "deploy/schemas/reference/kserve-tritonserver.yaml").read_text())
    assert kserve["args"] == runtime["spec"]["containers"][0]["args"]


def test_cpu_image_replay_ran_as_the_container_would(cpu_replay: dict[str, object]) -> None:
    """As the image's USER (1000) in a network namespace of its own, on the image's own ports."""
    if os.geteuid() != 0:
        pytest.skip("only root can run the server as another user")
    assert cpu_replay["ran_as_user"] == [1000, 1000], cpu_replay["python"]
    assert cpu_replay["network_namespace"] is True


def test_gpu_image_resolves_against_pypi(tmp_path: Path) -> None:
    """The GPU venv step, resolved with `pip install --dry-run` against PyPI (wheel metadata only). Without the
    tensorrt extra: PyPI's tensorrt-cu13-libs is a stub that downloads the wheel from pypi.nvidia.com, out of
    reach here."""
    gpu = replay.Image.load(DOCKERFILES["gpu"], {})
    extras = replay.stage_args(gpu.dockerfile, gpu.build_stage, {})["EXTRAS"].split(",")
    without_tensorrt = ",".join(e for e in extras if e != "tensorrt")
    summary = _run_replay(
        tmp_path,
        "--dockerfile",
        str(DOCKERFILES["gpu"]),
        "--resolve-only",
        "--build-arg",
        f"EXTRAS={without_tensorrt}",
    )
    versions: dict[str, str] = summary["resolution"]["distributions"]  # type: ignore[index]
    assert versions["torch"] == "2.13.0"  # PyPI's CUDA build, not a +cpu one
    assert "onnxruntime-gpu" in versions and "nvidia-ml-py" in versions
    assert any(name.startswith("nvidia-cudnn") for name in versions)
    assert versions["cuda-bindings"].split(".")[0] == "13"  # the CUDA of the base image
