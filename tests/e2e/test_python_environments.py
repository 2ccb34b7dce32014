"""Python models in environments of their own: a requirements.txt built into a cached virtual environment by uv, a
conda-pack style tarball or directory named by EXECUTION_ENV_PATH; and the load errors of environments that cannot
serve. Every package comes from wheels the test builds (`--backend-config=python,env-no-index=true`), never the
network. The environments live in the engine's process, so one frontend mode is enough."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from e2e.server_process import LOAD_ALL_EXPLICITLY, RunningServer, running_server
from e2e.wheels import build_wheel

pytestmark = pytest.mark.engine_served

MODEL = Path(__file__).parent / "python_models_env" / "env_version"
ENV_PARAMETER = 'parameters: {{ key: "EXECUTION_ENV_PATH", value: {{ string_value: "{}" }} }}\n'


def add_model(repo: Path, name: str, requirements: str = "", env_path: str = "") -> Path:
    model = repo / name
    shutil.copytree(MODEL, model, ignore=shutil.ignore_patterns("__pycache__"))
    if requirements:
        (model / "requirements.txt").write_text(requirements + "\n")
    if env_path:
        with open(model / "config.pbtxt", "a") as config:
            config.write(ENV_PARAMETER.format(env_path))
    return model


def make_environment(folder: Path, wheels: Path, *requirements: str, numpy: bool = True) -> Path:
    """A Python environment as conda-pack unpacks one: bin/python3 and site-packages with the requirements (and,
    through a .pth file, this Python's numpy, which a conda environment would carry itself)."""
    uv = [sys.executable, "-m", "uv"]
    subprocess.run([*uv, "venv", "-q", "--python", sys.executable, str(folder)], check=True)
    python = folder / "bin" / "python"
    if requirements:
        subprocess.run(
            [
                *uv,
                "pip",
                "install",
                "-q",
                "--python",
                str(python),
                "--no-index",
                "--find-links",
                str(wheels),
                *requirements,
            ],
            check=True,
        )
    if numpy:
        numpy_dir = folder / "numpy-of-the-test"
        numpy_dir.mkdir()
        (numpy_dir / "numpy").symlink_to(Path(np.__file__).parent)
        libs = Path(np.__file__).parent.parent / "numpy.libs"
        if libs.is_dir():
            (numpy_dir / "numpy.libs").symlink_to(libs)
        (next((folder / "lib").glob("python3*/site-packages")) / "numpy.pth").write_text(f"{numpy_dir}\n")
    return folder


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("environments")
    wheels = root / "wheels"
    for version in ("1.0", "2.0"):
        build_wheel(wheels, "mhtestpkg", version, f'VERSION = "{version}"\n')
    repo = root / "repo"
    add_model(repo, "needs_v1", requirements="mhtestpkg==1.0")
    add_model(repo, "needs_v2", requirements="mhtestpkg==2.0")
    add_model(repo, "unresolvable", requirements="mhtestpkg==3.0")
    # A tarball in the model's directory, named through $$TRITON_MODEL_DIRECTORY, as Triton's docs do.
    packed = add_model(repo, "packed", env_path="$$TRITON_MODEL_DIRECTORY/env.tar.gz")
    source = make_environment(root / "packed-env", wheels, "mhtestpkg==2.0")
    with tarfile.open(packed / "env.tar.gz", "w:gz") as archive:
        archive.add(source, arcname=".")
    unpacked = make_environment(root / "unpacked-env", wheels, "mhtestpkg==1.0")
    add_model(repo, "unpacked", env_path=str(unpacked))
    # Environments that cannot serve.
    not_env = add_model(repo, "not_an_env", env_path="$$TRITON_MODEL_DIRECTORY/env.tar.gz")
    (root / "readme").mkdir()
    (root / "readme" / "README").write_text("not an environment\n")
    with tarfile.open(not_env / "env.tar.gz", "w:gz") as archive:
        archive.add(root / "readme", arcname=".")
    no_numpy = make_environment(root / "no-numpy-env", wheels, "mhtestpkg==1.0", numpy=False)
    add_model(repo, "no_numpy", env_path=str(no_numpy))
    add_model(repo, "both", requirements="mhtestpkg==1.0", env_path=str(unpacked))
    add_model(repo, "missing_env", env_path="$$TRITON_MODEL_DIRECTORY/nowhere.tar.gz")
    flags = [
        f"--backend-config=python,env-cache-dir={root / 'cache'}",
        f"--backend-config=python,env-find-links={wheels}",
        "--backend-config=python,env-no-index=true",
    ]
    return repo, flags


@pytest.fixture(scope="module")
def server(
    setup: tuple[Path, list[str]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    repo, flags = setup
    log = tmp_path_factory.mktemp("log") / "server.log"
    with running_server([repo], log, *LOAD_ALL_EXPLICITLY, *flags) as running:
        yield running
    assert "Traceback" not in log.read_text()


def answer(server: RunningServer, model: str) -> tuple[str, str]:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        tensor = httpclient.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.array([1], dtype=np.float32))
        result = client.infer(model, [tensor])
        version, python = (result.as_numpy(name)[0].decode() for name in ("VERSION", "PYTHON"))
        return version, python
    finally:
        client.close()


def reasons(server: RunningServer) -> dict[str, str]:
    index = requests.post(f"http://{server.http_url}/v2/repository/index", timeout=10).json()
    return {entry["name"]: entry.get("reason", "") for entry in index if entry.get("state") != "READY"}


def test_models_needing_conflicting_versions_serve_side_by_side(
    server: RunningServer, setup: tuple[Path, list[str]]
) -> None:
    assert importlib.util.find_spec("mhtestpkg") is None  # not in the server's own Python
    (v1, python_1), (v2, python_2) = answer(server, "needs_v1"), answer(server, "needs_v2")
    assert (v1, v2) == ("1.0", "2.0")
    cache = setup[0].parent / "cache"
    assert python_1 != python_2
    assert all(Path(p).is_relative_to(cache) for p in (python_1, python_2))
    log = server.log()
    assert "the Python environment of model 'needs_v1'" in log and "+ mhtestpkg==1.0" in log  # its progress


def test_packed_and_unpacked_environments_run_the_model(
    server: RunningServer, setup: tuple[Path, list[str]]
) -> None:
    version, python = answer(server, "packed")
    assert version == "2.0"
    assert Path(python).parent.parent.name.startswith("packed-")  # unpacked into the cache, under its hash
    assert Path(python).is_relative_to(setup[0].parent / "cache")
    version, python = answer(server, "unpacked")
    assert version == "1.0"
    assert Path(python).is_relative_to(setup[0].parent / "unpacked-env")


@pytest.mark.parametrize(
    ("model", "cause"),
    [
        ("unresolvable", "No solution found when resolving dependencies"),
        ("unresolvable", "mhtestpkg==3.0"),
        ("not_an_env", "is not a Python environment: it has no bin/python3"),
        ("no_numpy", "cannot run the stub: no numpy"),
        ("both", "has both EXECUTION_ENV_PATH and requirements"),
        ("missing_env", "nowhere.tar.gz' of model 'missing_env' does not exist"),
    ],
)
def test_an_environment_that_cannot_serve_fails_its_load_with_the_cause(
    server: RunningServer, model: str, cause: str
) -> None:
    reason = reasons(server)[model]
    assert f"'{model}'" in reason and cause in reason, reason
    assert answer(server, "needs_v1")[0] == "1.0"  # the others serve
    # A load request answers the same cause.
    r = requests.post(f"http://{server.http_url}/v2/repository/models/{model}/load", timeout=60)
    assert r.status_code == 400 and cause in r.json()["error"], r.text


def test_a_second_server_with_the_same_cache_builds_nothing(
    server: RunningServer, setup: tuple[Path, list[str]], tmp_path: Path
) -> None:
    repo, flags = setup
    answer(server, "packed")  # built and unpacked by the first server
    with running_server(
        [repo], tmp_path / "second.log", "--model-control-mode=explicit", "--load-model=needs_v2",
        "--load-model=packed", *flags,
    ) as second:  # fmt: skip
        assert answer(second, "needs_v2")[0] == "2.0"
        assert answer(second, "packed")[0] == "2.0"
        log = second.log()
    assert "the Python environment of model 'needs_v2'" in log and ": using " in log
    assert "building in" not in log and "unpacking into" not in log
