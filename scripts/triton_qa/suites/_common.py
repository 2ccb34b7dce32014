"""Helpers the recipes share: tritonserver's paths in Triton's CI and the model kinds a suite copies."""

from __future__ import annotations

from pathlib import Path

from triton_qa import models
from triton_qa.core import SuiteContext

# The paths test.sh passes to tritonserver; modelhost accepts --backend-directory and ignores it.
BACKEND_DIR = "/opt/tritonserver/backends"
KINDS = ("onnx", "libtorch")


def fresh(path: Path) -> Path:
    """`rm -fr path && mkdir path`."""
    import shutil

    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def copy_kinds(
    ctx: SuiteContext, data: str, dest: Path, kinds: tuple[str, ...] = KINDS, pattern: str = "{k}*"
) -> list[str]:
    """`cp -r $DATADIR/<data>/${BACKEND}* dest/.` for the ONNX and libtorch kinds."""
    src = ctx.data(data)
    names: list[str] = []
    for k in kinds:
        names += models.copy_models(src, dest, [pattern.format(k=k)])
    return names
