"""`auto_complete_config` of a python model: its static method runs in a short-lived stub at config time, with
the config as Triton's JSON, and what it returns (through pb_utils.ModelConfig) becomes the config."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
from pathlib import Path
from typing import Any

from modelhost.backends.python.environments import environment_for
from modelhost.backends.python.process import StubSettings, exchange, spawn_stub
from modelhost.config.json_form import config_from_json, config_to_json
from modelhost.errors import ModelConfigError, ModelhostError
from modelhost.repository.layout import version_directories

log = logging.getLogger("modelhost.python")
_ids = itertools.count(1_000_000)  # apart from the instances' stub numbers


def autocomplete_python(
    config: Any, model_dir: Path, settings: StubSettings | None = None, model_file: Path | None = None
) -> None:
    """Complete `config` in place from the model's `auto_complete_config` (the newest version's model file, or
    `model_file`: a python-based backend's)."""
    filename = config.default_model_filename  # filled in ("model.py") before auto-complete runs
    files = (
        [model_file]
        if model_file is not None
        else [
            d / filename
            for d in reversed(version_directories(model_dir).values())
            if (d / filename).is_file()
        ]
    )
    if not files:
        return  # the load reports the missing file
    settings = settings or StubSettings()
    environment = environment_for(config, model_dir, settings.environments)  # built here on a first load
    process, sock, _ = spawn_stub(settings, next(_ids), environment)
    what = f"model '{config.name}' (auto_complete_config)"
    try:
        reply = exchange(
            sock,
            process,
            {
                "op": "auto_complete",
                "model_file": str(files[0]),
                "config": json.dumps(config_to_json(config)),
            },
            "auto_complete_done",
            settings.stub_timeout_seconds,
            what,
        )
    except ModelhostError as e:
        raise ModelConfigError(f"auto-complete of {what} failed: {e}") from e
    finally:
        sock.close()  # the stub ends when its socket closes
        with contextlib.suppress(Exception):
            process.wait(settings.stub_timeout_seconds)
    if reply.get("error") and reply.get("stage") == "import":
        # As Triton: logged here, and the load of each version reports it (as the instance's failure).
        log.error("Failed to initialize Python stub for auto-complete: %s", reply["error"])
        return
    if reply.get("error"):
        raise ModelConfigError(f"auto_complete_config of model '{config.name}' failed: {reply['error']}")
    completed = config_from_json(reply["config"], config.name)
    config.CopyFrom(completed)
