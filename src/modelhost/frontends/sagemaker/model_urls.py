"""Where a multi-model endpoint's POST /models points: the url checked, and the model directories found there.

SageMaker copies each model of a multi-model endpoint to /opt/ml/models/<hash>/model and asks for it to be loaded
from that url. The directory is either a model directory itself (its config.pbtxt, or only version directories)
or a small repository of model directories: one model, or an ensemble and the models its steps use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from modelhost.errors import InvalidArgument

_ENSEMBLE = re.compile(r'platform:\s*"ensemble"')
_NAME = "[0-9A-Za-z._]+"  # Triton's characters for the hash and the subdirectory


@dataclass(frozen=True, slots=True)
class ModelLocation:
    # The model directory loaded under the target name.
    model_dir: Path
    # What GET /models shows as modelUrl: Triton's repository path for this load.
    model_url: str
    # Model directories beside it that an ensemble uses, by their own names.
    companions: dict[str, Path] = field(default_factory=dict)


def _invalid(url: str, why: str) -> InvalidArgument:
    return InvalidArgument(f"Invalid \"url\" '{url}': {why}")


def _is_model_dir(path: Path) -> bool:
    if (path / "config.pbtxt").is_file():
        return True
    children = [c for c in path.iterdir() if c.is_dir() and not c.name.startswith(".")]
    return bool(children) and all(c.name.isdigit() for c in children)


def _is_ensemble(path: Path) -> bool:
    try:
        return _ENSEMBLE.search((path / "config.pbtxt").read_text(errors="replace")) is not None
    except OSError:
        return False


def locate_model(url: object, root: str) -> ModelLocation:
    """The model a load request's `url` names, under `root` (/opt/ml/models). Raises InvalidArgument (400) for a
    url that is not a string, leaves the root, or holds no model (or several, none of them an ensemble)."""
    if url is None:
        raise InvalidArgument('the load request has no \'url\': expected {"model_name": ..., "url": ...}')
    if not isinstance(url, str):
        raise InvalidArgument("Unable to parse 'url': attempt to access JSON non-string as string")
    expected = f"expected a path of the form {root}/<hash>/model[/<subdir>]"
    if not url.startswith("/"):
        raise _invalid(url, expected)
    parts = url.split("/")
    if ".." in parts or "." in parts:
        raise _invalid(url, "'.' and '..' are not allowed in a model url")
    if re.match(r"/+(dev|proc|sys)(/|$)", url):
        raise _invalid(url, "/dev, /proc and /sys hold no models")
    match = re.fullmatch(rf"({re.escape(root)}/{_NAME})/model(?:/({_NAME}))?/?", url)
    if match is None:
        raise _invalid(url, expected)
    path = Path(url.rstrip("/"))
    if not path.is_dir():
        raise _invalid(url, "no such directory")
    try:
        if _is_model_dir(path):
            return ModelLocation(path, match.group(1))
        subdirs = sorted(c for c in path.iterdir() if c.is_dir() and not c.name.startswith("."))
    except OSError as e:
        raise _invalid(url, f"cannot be read: {e.strerror}") from e
    if not subdirs:
        raise _invalid(url, "holds no model directory")
    ensembles = [d for d in subdirs if _is_ensemble(d)]
    if len(ensembles) > 1:
        names = ", ".join(d.name for d in ensembles)
        raise _invalid(url, f"holds several ensembles ({names}): one model per url")
    if ensembles:
        target = ensembles[0]
    elif len(subdirs) == 1:
        target = subdirs[0]
    else:
        names = ", ".join(d.name for d in subdirs)
        raise _invalid(
            url, f"holds several model directories ({names}) and none is an ensemble: one model per url"
        )
    companions = {d.name: d for d in subdirs if d != target}
    return ModelLocation(target, url.rstrip("/"), companions)
