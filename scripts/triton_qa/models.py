"""Model repositories for the suites: the generated ones of Triton's CI (`/data/inferenceserver/<version>/...`,
made by qa/common/gen_qa_model_repository) for the ONNX and libtorch kinds, and helpers to copy and edit models
as the suites' test.sh do (sed on config.pbtxt, python models made from ONNX configs, stand-ins for Triton's C++
test backends).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from triton_qa.core import STAND_INS, SuiteContext

# name -> the generator commands of qa/common/gen_qa_model_repository that make it, ONNX and libtorch only
# (its TensorFlow, TensorRT and OpenVINO commands are left out). Paths are relative to the cache.
_ONNX = ["--onnx", "--onnx_opset=0"]
GENERATED: dict[str, list[list[str]]] = {
    "qa_model_repository": [
        ["gen_qa_models.py", *_ONNX],
        ["gen_qa_models.py", "--libtorch"],
    ],
    "qa_variable_model_repository": [
        ["gen_qa_models.py", *_ONNX, "--variable"],
        ["gen_qa_models.py", "--libtorch", "--variable"],
    ],
    "qa_identity_model_repository": [
        ["gen_qa_identity_models.py", *_ONNX],
        ["gen_qa_identity_models.py", "--libtorch"],
    ],
    "qa_reshape_model_repository": [
        ["gen_qa_reshape_models.py", *_ONNX, "--variable"],
        ["gen_qa_reshape_models.py", "--libtorch", "--variable"],
    ],
    "qa_sequence_model_repository": [
        ["gen_qa_sequence_models.py", *_ONNX],
        ["gen_qa_sequence_models.py", "--libtorch"],
    ],
    "qa_variable_sequence_model_repository": [
        ["gen_qa_sequence_models.py", *_ONNX, "--variable"],
        ["gen_qa_sequence_models.py", "--libtorch", "--variable"],
    ],
    "qa_sequence_implicit_model_repository": [
        ["gen_qa_implicit_models.py", *_ONNX],
        ["gen_qa_implicit_models.py", "--libtorch"],
    ],
    "qa_variable_sequence_implicit_model_repository": [
        ["gen_qa_implicit_models.py", *_ONNX, "--variable"],
        ["gen_qa_implicit_models.py", "--libtorch", "--variable"],
    ],
    "qa_sequence_initial_state_implicit_model_repository": [
        ["gen_qa_implicit_models.py", "--onnx", "--initial-state", "zero", "--onnx_opset=0"],
    ],
    "qa_variable_sequence_initial_state_implicit_model_repository": [
        ["gen_qa_implicit_models.py", "--onnx", "--initial-state", "zero", "--onnx_opset=0", "--variable"],
    ],
    "qa_dyna_sequence_model_repository": [
        ["gen_qa_dyna_sequence_models.py", *_ONNX],
        ["gen_qa_dyna_sequence_models.py", "--libtorch"],
    ],
    "qa_dyna_sequence_implicit_model_repository": [
        ["gen_qa_dyna_sequence_implicit_models.py", *_ONNX],
    ],
    "qa_ragged_model_repository": [
        ["gen_qa_ragged_models.py", *_ONNX],
        ["gen_qa_ragged_models.py", "--libtorch"],
    ],
    "qa_scalar_models": [["gen_qa_ort_scalar_models.py", "--onnx_opset=0"]],
    # Ensembles are configurations only (no framework needed): all platforms', as in Triton's CI; the suites
    # copy those of the ONNX and libtorch models.
    "qa_ensemble_model_repository/qa_model_repository": [["gen_qa_models.py", "--ensemble"]],
    "qa_ensemble_model_repository/qa_variable_model_repository": [
        ["gen_qa_models.py", "--ensemble", "--variable"]
    ],
    "qa_ensemble_model_repository/qa_reshape_model_repository": [["gen_qa_reshape_models.py", "--ensemble"]],
    "qa_ensemble_model_repository/qa_identity_model_repository": [
        ["gen_qa_identity_models.py", "--ensemble"]
    ],
    "qa_ensemble_model_repository/qa_sequence_model_repository": [
        ["gen_qa_sequence_models.py", "--ensemble"]
    ],
    "qa_ensemble_model_repository/qa_variable_sequence_model_repository": [
        ["gen_qa_sequence_models.py", "--ensemble", "--variable"]
    ],
}


def generated(ctx: SuiteContext, name: str) -> Path:
    """The generated repository `name` under the cache, made on first use (a `.complete` marker after)."""
    if name not in GENERATED:
        raise KeyError(f"no generator for {name}")
    dest = ctx.cache / "data" / name
    if (dest / ".complete").exists():
        return dest
    if dest.exists():
        shutil.rmtree(dest)
    tmp = dest.with_name(dest.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    log = ctx.cache / "generate.log"
    started = time.monotonic()
    ctx.log(f"  generating {name} ...")
    for cmd in GENERATED[name]:
        full = [ctx.python, cmd[0], *cmd[1:], f"--models_dir={tmp}"]
        with open(log, "ab") as f:
            f.write(f"\n=== {' '.join(full)}\n".encode())
            f.flush()
            proc = subprocess.run(
                full, cwd=ctx.qa / "common", stdout=f, stderr=subprocess.STDOUT, timeout=1800, check=False
            )
        if proc.returncode != 0:
            raise RuntimeError(
                f"generating {name}: {' '.join(cmd)} failed (status {proc.returncode}); see {log}"
            )
    tmp.rename(dest)
    (dest / ".complete").write_text("")
    ctx.log(f"  generated {name} in {time.monotonic() - started:.0f}s")
    return dest


# --- copying and editing -----------------------------------------------------------------------------------


def copy_models(
    src: Path, dest: Path, patterns: Iterable[str] = ("*",), exclude: Iterable[str] = ()
) -> list[str]:
    """`cp -r src/PATTERN dest/.` for each pattern; returns the names copied."""
    dest.mkdir(parents=True, exist_ok=True)
    excluded = [re.compile(e) for e in exclude]
    names: list[str] = []
    for pattern in patterns:
        for path in sorted(src.glob(pattern)):
            if path.name.startswith(".") or not path.is_dir() or any(e.search(path.name) for e in excluded):
                continue
            target = dest / path.name
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(path, target, symlinks=False)
            names.append(path.name)
    return names


def sed(
    path: Path,
    pattern: str,
    repl: str,
    count: int = 0,
    flags: int = re.MULTILINE,
    first_per_line: bool = False,
) -> None:
    """`sed -i "s/pattern/repl/g"` on a file (Python regular expressions); `count` replaces only the first
    `count` matches of the file (`sed "0,/re/{s//x/}"`), `first_per_line` the first of each line (`s/re/x/`,
    without g)."""
    text = path.read_text()
    if first_per_line:
        text = "".join(re.sub(pattern, repl, line, count=1) for line in text.splitlines(keepends=True))
    else:
        text = re.sub(pattern, repl, text, count=count, flags=flags)
    path.write_text(text)


def append(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text if text.endswith("\n") else text + "\n")


def config(model_dir: Path) -> Path:
    return model_dir / "config.pbtxt"


def nop_version_dirs(repo: Path) -> None:
    """create_nop_version_dir of qa/common/util.sh."""
    for model in repo.iterdir():
        if "nop_" in model.name and model.is_dir():
            (model / "1").mkdir(parents=True, exist_ok=True)


def stand_in(name: str) -> Path:
    """A stand-in python model for one of Triton's C++ test backends (`identity`, `sequence`, ...)."""
    return STAND_INS / name / "model.py"


_BACKEND_RE = re.compile(r'^\s*backend\s*:\s*"([^"]+)"', re.MULTILINE)


def backend_of(model_dir: Path) -> str | None:
    cfg = config(model_dir)
    if not cfg.exists():
        return None
    m = _BACKEND_RE.search(cfg.read_text())
    return m.group(1) if m else None


# Triton's C++ test backends modelhost stands in for with a python model of the same behaviour.
STAND_IN_BACKENDS = {"identity": "identity", "sequence": "sequence", "repeat": "repeat"}


def stand_in_config(path: Path, backend: str) -> None:
    """A config file of one of Triton's C++ test backends made the python stand-in's: `backend: "python"` and
    the stand-in by its absolute path, so that version folders the tests make later, empty as Triton's C++
    backends allow, load it too."""
    sed(path, r'^(\s*)backend\s*:\s*"[^"]+"', r'\1backend: "python"')
    sed(path, r"^\s*default_model_filename\s*:.*$", "")
    append(path, f'default_model_filename: "{stand_in(STAND_IN_BACKENDS[backend]).resolve()}"\n')


def replace_test_backends(repo: Path, used: set[str] | None = None) -> list[str]:
    """Every model of `repo` whose backend is one of Triton's C++ test backends gets the python stand-in
    (`stand_in_config`), and a version folder if it has none (as for the nop models). Returns the models
    changed."""
    changed: list[str] = []
    for model in sorted(p for p in repo.iterdir() if p.is_dir()):
        backend = backend_of(model)
        if backend not in STAND_IN_BACKENDS:
            continue
        stand_in_config(config(model), backend)
        if not any(v.is_dir() and v.name.isdigit() for v in model.iterdir()):
            (model / "1").mkdir()
        changed.append(model.name)
        if used is not None:
            used.add(backend)
    return changed


def python_from_onnx(
    onnx_model: Path, dest: Path, model_py: Path, name_from: str = "onnx", to: str = "python"
) -> Path:
    """A python model made from an ONNX model's config as L0_infer's generate_model_repository does: platform
    dropped, version_policy replaced by `backend: "python"`, "onnx" renamed, the given model.py in version 1."""
    name = onnx_model.name.replace(name_from, to)
    target = dest / name
    (target / "1").mkdir(parents=True, exist_ok=True)
    text = config(onnx_model).read_text()
    text = re.sub(r"platform:.*", "", text)
    text = re.sub(r"version_policy.*", 'backend: "python"', text)
    text = text.replace(name_from, to)
    config(target).write_text(text)
    labels = onnx_model / "output0_labels.txt"
    if labels.exists():
        shutil.copy(labels, target / "output0_labels.txt")
    shutil.copy(model_py, target / "1" / "model.py")
    return target


def cpu_only(repo: Path) -> list[str]:
    """TARGET=cpu: instance groups of kind KIND_GPU made KIND_CPU (Triton's CPU-only CI runs on CPU)."""
    changed: list[str] = []
    for model in sorted(p for p in repo.iterdir() if p.is_dir()):
        cfg = config(model)
        if cfg.exists() and "KIND_GPU" in cfg.read_text():
            sed(cfg, r"KIND_GPU", "KIND_CPU")
            changed.append(model.name)
    return changed


def repositories_of(args: Iterable[str], work: Path) -> list[Path]:
    """The local model repositories named by --model-repository / --model-store flags."""
    out: list[Path] = []
    items = list(args)
    for i, a in enumerate(items):
        value = None
        for flag in ("--model-repository", "--model-store"):
            if a.startswith(flag + "="):
                value = a.split("=", 1)[1]
            elif a == flag and i + 1 < len(items):
                value = items[i + 1]
        if value and "://" not in value:
            p = Path(value)
            out.append(p if p.is_absolute() else work / p)
    return out


def translate_repositories(args: Iterable[str], work: Path) -> None:
    """What every configuration's repositories get before the server starts: stand-ins for Triton's C++ test
    backends and KIND_CPU instances."""
    for repo in repositories_of(args, work):
        if repo.is_dir():
            replace_test_backends(repo)
            cpu_only(repo)
