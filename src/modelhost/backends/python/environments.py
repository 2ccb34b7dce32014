"""The Python a python model's stub runs under: the server's own, or the model's environment.

- `EXECUTION_ENV_PATH` (a config parameter, as Triton reads it; `$$TRITON_MODEL_DIRECTORY` is the model's
  directory): a conda-pack tarball (`.tar.gz`, `.tgz`, `.tar`), unpacked once into the cache under the hash of its
  content, or an unpacked environment directory. The stub runs under its `bin/python3` with its `bin` first on
  PATH and its `lib` first on LD_LIBRARY_PATH. As Triton's, it must have numpy; unlike Triton's it may be any
  Python from 3.10 on (the stub is Python, not a binary built for one version).
- A `requirements.txt` in the model's directory (or the file the `REQUIREMENTS_PATH` parameter names): a virtual
  environment of the server's Python built with uv on the first load, cached under the hash of the requirements,
  the Python version and the index settings, so later loads (and other servers sharing the cache) start at once.
  Its site-packages come first; the server's numpy is behind them, for models that do not name their own.

Either way the stub imports only the standard library, numpy and modelhost's stub package, which a directory of
its own (`stub-path` in the cache) puts on the stub's PYTHONPATH without the server's other packages.

Settings (`--backend-config=python,<key>=<value>`): `env-cache-dir` (default `$XDG_CACHE_HOME/modelhost/
python-envs`), `env-index-url`, `env-find-links` (a directory of wheels), `env-no-index` (`true`: only
`env-find-links`, for machines without a network).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelhost.errors import ModelConfigError

log = logging.getLogger("modelhost.python")

ENV_PATH_PARAMETER = "EXECUTION_ENV_PATH"
REQUIREMENTS_PARAMETER = "REQUIREMENTS_PATH"
REQUIREMENTS_FILE = "requirements.txt"
MODEL_DIRECTORY_VARIABLE = "$$TRITON_MODEL_DIRECTORY"
MIN_PYTHON = (3, 10)  # the stub's own code needs this much
_COMPLETE = ".modelhost-complete"  # written last: a directory without it is a build that did not finish
_TARBALL_SUFFIXES = (".tar.gz", ".tgz", ".tar")
# Run under the environment's Python before any stub: says what it lacks, in words.
_PROBE = (
    "import sys\n"
    f"if sys.version_info < {MIN_PYTHON!r}: sys.exit('Python %d.%d, older than "
    f"{MIN_PYTHON[0]}.{MIN_PYTHON[1]}' % sys.version_info[:2])\n"
    "try:\n    import numpy\nexcept ImportError as e: sys.exit(f'no numpy ({e})')\n"
    "import modelhost.backends.python.stub\n"
)


@dataclass(frozen=True)
class EnvironmentSettings:
    cache_dir: Path
    index_url: str = ""
    find_links: str = ""
    no_index: bool = False

    @classmethod
    def from_backend_config(cls, config: Mapping[str, str]) -> EnvironmentSettings:
        cache = config.get("env-cache-dir") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "modelhost", "python-envs"
        )
        no_index = config.get("env-no-index", "false").lower()
        if no_index not in ("true", "false", "1", "0"):
            raise ModelConfigError(
                f"--backend-config=python,env-no-index must be true or false, not '{no_index}'"
            )
        return cls(
            Path(cache),
            config.get("env-index-url", ""),
            config.get("env-find-links", ""),
            no_index in ("true", "1"),
        )

    def index_flags(self) -> list[str]:
        flags = ["--index-url", self.index_url] if self.index_url else []
        flags += ["--find-links", self.find_links] if self.find_links else []
        return flags + (["--no-index"] if self.no_index else [])


@dataclass(frozen=True)
class PythonEnvironment:
    """How to start a stub: its Python and the variables added to its environment."""

    python: str
    variables: dict[str, str] = field(default_factory=dict)
    description: str = "the server's Python"


SERVER_PYTHON = PythonEnvironment(sys.executable)

# What this server has built, unpacked and checked already (a model's other instances and later loads).
_resolved: dict[tuple[Any, ...], PythonEnvironment] = {}
_unpacked_roots: dict[tuple[str, int, int, str], Path] = {}


def environment_for(config: Any, model_dir: Path, settings: EnvironmentSettings) -> PythonEnvironment:
    """The Python that the stubs of this model run under (built or unpacked on first use; blocking)."""
    parameters = {key: value.string_value for key, value in config.parameters.items()}
    env_path = _expand(parameters.get(ENV_PATH_PARAMETER, ""), model_dir)
    requirements = _expand(parameters.get(REQUIREMENTS_PARAMETER, ""), model_dir)
    if not requirements and (model_dir / REQUIREMENTS_FILE).is_file():
        requirements = str(model_dir / REQUIREMENTS_FILE)
    if not env_path and not requirements:
        return SERVER_PYTHON
    if env_path and requirements:
        raise ModelConfigError(
            f"model '{config.name}' has both {ENV_PATH_PARAMETER} and requirements ({requirements}): give one "
            "(install the requirements into the environment instead)"
        )
    # One build per environment however many instances (and servers) load it at once: `_building` locks it.
    if env_path:
        return _packed_environment(config.name, Path(env_path), settings)
    return _requirements_environment(config.name, Path(requirements), settings)


def _expand(value: str, model_dir: Path) -> str:
    return value.replace(MODEL_DIRECTORY_VARIABLE, str(model_dir)) if value else ""


# -- EXECUTION_ENV_PATH ------------------------------------------------------------------------------------------


def _packed_environment(model: str, path: Path, settings: EnvironmentSettings) -> PythonEnvironment:
    what = f"{ENV_PATH_PARAMETER} '{path}' of model '{model}'"
    if path.is_dir():
        root = path
    elif path.is_file() and path.name.endswith(_TARBALL_SUFFIXES):
        root = _unpacked(path, settings, what)
    elif path.exists():
        raise ModelConfigError(f"{what} is neither a directory nor a tarball (.tar.gz, .tgz, .tar)")
    else:
        raise ModelConfigError(f"{what} does not exist")
    python = next((root / "bin" / n for n in ("python3", "python") if (root / "bin" / n).exists()), None)
    if python is None:
        raise ModelConfigError(f"{what} is not a Python environment: it has no bin/python3")
    library = os.environ.get("LD_LIBRARY_PATH", "")
    environment = PythonEnvironment(
        str(python),
        {
            "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "LD_LIBRARY_PATH": f"{root / 'lib'}{os.pathsep + library if library else ''}",
            "PYTHONPATH": str(_stub_path(settings)),
            "PYTHONHOME": "",  # removed: the environment's Python finds its own
        },
        f"the environment {path}",
    )
    return _checked(environment, what)


def _unpacked(tarball: Path, settings: EnvironmentSettings, what: str) -> Path:
    """The tarball unpacked under the hash of its content: once, whichever server of the cache comes first."""
    stat = tarball.stat()
    seen = (str(tarball.resolve()), stat.st_size, stat.st_mtime_ns, str(settings.cache_dir))
    if seen in _unpacked_roots:  # hashed already by this server: an unchanged file has the same content
        return _unpacked_roots[seen]
    digest = hashlib.sha256()
    with open(tarball, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    root = settings.cache_dir / f"packed-{digest.hexdigest()[:24]}"
    with _building(root):
        if not (root / _COMPLETE).exists():
            log.info("%s: unpacking into %s", what, root)
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            try:
                with tarfile.open(tarball) as archive:
                    # "tar": no absolute paths, nothing outside `root`, no device files; links as packed.
                    archive.extractall(root, filter="tar")
            except (tarfile.TarError, OSError, EOFError) as e:
                shutil.rmtree(root, ignore_errors=True)
                raise ModelConfigError(f"{what} could not be unpacked: {e}") from e
            (root / _COMPLETE).touch()
    _unpacked_roots[seen] = root
    return root


# -- requirements.txt --------------------------------------------------------------------------------------------


def _requirements_environment(
    model: str, requirements: Path, settings: EnvironmentSettings
) -> PythonEnvironment:
    what = f"the Python environment of model '{model}' ({requirements})"
    try:
        text = requirements.read_bytes()
    except OSError as e:
        raise ModelConfigError(f"{what}: the requirements cannot be read: {e.strerror or e}") from e
    digest = hashlib.sha256(text)
    digest.update(sys.version.encode())
    digest.update(" ".join(settings.index_flags()).encode())
    root = settings.cache_dir / f"venv-{digest.hexdigest()[:24]}"
    python = root / "bin" / "python"
    environment = PythonEnvironment(
        str(python), {"PYTHONPATH": str(_stub_path(settings))}, f"the environment of {requirements}"
    )
    key = ("venv", str(root))
    if key in _resolved:
        return _resolved[key]
    with _building(root):
        if (root / _COMPLETE).exists():
            log.info("%s: using %s", what, root)
        else:
            _build_venv(root, requirements, settings, what, environment)
    _resolved[key] = environment
    return environment


_uv_lock = threading.Lock()


def _uv_binary() -> str:
    """uv's executable: next to this Python (where pip puts the `uv` package's binary), else where the package
    says (under a lock: its lookup reads sysconfig, whose first use is not thread-safe), else on PATH."""
    beside = Path(sys.executable).with_name("uv")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    with _uv_lock:
        try:
            from uv import find_uv_bin

            return str(find_uv_bin())
        except (ImportError, FileNotFoundError, TypeError):
            found = shutil.which("uv")
    if found is None:
        raise ModelConfigError(
            "uv, which builds python models' environments, is not installed (pip install uv)"
        )
    return found


def _build_venv(
    root: Path, requirements: Path, settings: EnvironmentSettings, what: str, environment: PythonEnvironment
) -> None:
    uv = _uv_binary()
    log.info("%s: building in %s", what, root)
    shutil.rmtree(root, ignore_errors=True)
    steps = [
        [uv, "venv", "--quiet", "--python", sys.executable, str(root)],
        [
            uv,
            "pip",
            "install",
            "--python",
            str(root / "bin" / "python"),
            "-r",
            str(requirements),
            *settings.index_flags(),
        ],
    ]
    for step in steps:
        output = _run_logged(step, what, root)
        if output is not None:
            shutil.rmtree(root, ignore_errors=True)
            raise ModelConfigError(f"failed to build {what}: {output}")
    # The server's numpy behind the environment's own packages: a .pth line is appended to sys.path.
    site = next((root / "lib").glob("python3*/site-packages"))
    (site / "_modelhost_server_numpy.pth").write_text(f"{_numpy_path(settings)}\n")
    try:  # once, at the build: a requirement may break what the stub needs (numpy, say)
        _checked(environment, what)
    except ModelConfigError:
        shutil.rmtree(root, ignore_errors=True)
        raise
    (root / _COMPLETE).touch()
    log.info("%s: built", what)


def _run_logged(command: list[str], what: str, cwd: Path) -> str | None:
    """Run a build step, its output to the log line by line as it comes; None, or its output when it failed."""
    lines: list[str] = []
    env = {**os.environ, "NO_COLOR": "1", "UV_NO_PROGRESS": "1"}
    env.pop("VIRTUAL_ENV", None)
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd.parent
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            line = line.rstrip()
            if line and not line.startswith("Using Python"):  # uv's note of the environment it installs into
                lines.append(line)
                log.info("%s: %s", what, line)
        code = process.wait()
    return None if code == 0 else "\n".join(lines[-40:]) or f"{command[1]} exited with code {code}"


# -- what every environment's stub needs -------------------------------------------------------------------------


def _stub_path(settings: EnvironmentSettings) -> Path:
    """A directory holding only modelhost's package: on the stub's PYTHONPATH, it brings the stub and nothing of
    the server's other packages."""
    import modelhost

    return _linked(settings, "stub-path", {"modelhost": Path(modelhost.__file__).parent})


def _numpy_path(settings: EnvironmentSettings) -> Path:
    import numpy

    package = Path(numpy.__file__).parent
    links = {"numpy": package}
    libs = package.parent / "numpy.libs"  # the wheel's own BLAS, next to it
    if libs.is_dir():
        links["numpy.libs"] = libs
    return _linked(settings, f"server-numpy-{hashlib.sha256(str(package).encode()).hexdigest()[:12]}", links)


_linking = threading.Lock()  # this server's loading threads make the same links at once


def _linked(settings: EnvironmentSettings, name: str, links: dict[str, Path]) -> Path:
    folder = settings.cache_dir / name
    with _linking:
        folder.mkdir(parents=True, exist_ok=True)
        for link, target in links.items():
            path = folder / link
            if path.is_symlink() and os.readlink(path) == str(target):
                continue
            temporary = folder / f".{link}.{os.getpid()}"  # this server's own: other servers use theirs
            with contextlib.suppress(FileNotFoundError):
                temporary.unlink()
            temporary.symlink_to(target)
            temporary.replace(path)  # atomic: another server may be reading it
    return folder


def _checked(environment: PythonEnvironment, what: str) -> PythonEnvironment:
    """The environment, once its Python has shown it can run the stub; else a load error saying why."""
    key = ("checked", environment.python, tuple(sorted(environment.variables.items())))
    if key in _resolved:
        return environment
    try:
        probe = subprocess.run(
            [environment.python, "-c", _PROBE],
            env=stub_variables(environment),
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ModelConfigError(f"{what}: its Python ({environment.python}) cannot run: {e}") from e
    if probe.returncode != 0:
        reason = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1]
        raise ModelConfigError(f"{what}: its Python ({environment.python}) cannot run the stub: {reason}")
    _resolved[key] = environment
    return environment


def stub_variables(environment: PythonEnvironment) -> dict[str, str] | None:
    """The process environment of a stub under `environment` (None: the server's, unchanged)."""
    if not environment.variables:
        return None
    variables = {**os.environ, **environment.variables}
    for name, value in environment.variables.items():
        if not value:
            variables.pop(name, None)
    variables.pop("VIRTUAL_ENV", None)
    return variables


@contextlib.contextmanager
def _building(root: Path) -> Iterator[None]:
    """Held while `root` is checked and built, against this server's other threads and other servers (each
    open() of the lock file is its own flock holder)."""
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f"{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


__all__ = [
    "ENV_PATH_PARAMETER",
    "REQUIREMENTS_PARAMETER",
    "SERVER_PYTHON",
    "EnvironmentSettings",
    "PythonEnvironment",
    "environment_for",
    "stub_variables",
]
