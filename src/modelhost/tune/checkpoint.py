"""The state of a tuning run, written to DIR/checkpoint.json after every measurement (Model Analyzer writes
its checkpoint only after all of a model's runs: model_analyzer#741), and read back by --resume.

A resumed run replays its search: every point already measured, and every variant that failed, is taken from
the checkpoint instead of being measured again, so the search takes the same path and goes on where it stopped.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelhost.tune.point import Point
from modelhost.tune.space import Variant

FORMAT = 1
FILENAME = "checkpoint.json"


@dataclass
class VariantRecord:
    name: str  # Model Analyzer's naming: <model>_config_default, <model>_config_<n>
    variant: Variant
    failure: str = ""  # why it could not be loaded (validation or the server's load error)
    errors: dict[int, str] = field(default_factory=dict)  # concurrency -> why requests failed there


@dataclass
class RunState:
    model: str
    fingerprint: dict[str, Any]
    runs: int = 1
    variants: dict[str, VariantRecord] = field(default_factory=dict)  # by Variant.key
    points: dict[tuple[str, int], Point] = field(default_factory=dict)  # by (Variant.key, concurrency)

    def record(self, variant: Variant, default: bool = False) -> VariantRecord:
        existing = self.variants.get(variant.key)
        if existing is None:
            numbered = sum(1 for r in self.variants.values() if not r.name.endswith("_config_default"))
            name = f"{self.model}_config_default" if default else f"{self.model}_config_{numbered}"
            existing = self.variants[variant.key] = VariantRecord(name, variant)
        return existing

    def points_of(self, variant: Variant) -> list[Point]:
        return sorted(
            (p for p in self.points.values() if p.variant == variant.key), key=lambda p: p.concurrency
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "model": self.model,
            "fingerprint": self.fingerprint,
            "runs": self.runs,
            "variants": [
                {
                    "name": r.name,
                    "variant": r.variant.to_json(),
                    "failure": r.failure,
                    "errors": {str(c): e for c, e in r.errors.items()},
                }
                for r in self.variants.values()
            ],
            "points": [p.to_json() for p in self.points.values()],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunState:
        state = cls(str(data["model"]), dict(data["fingerprint"]), int(data["runs"]))
        for entry in data["variants"]:
            variant = Variant.from_json(entry["variant"])
            errors = {int(c): str(e) for c, e in entry.get("errors", {}).items()}
            state.variants[variant.key] = VariantRecord(
                str(entry["name"]), variant, str(entry["failure"]), errors
            )
        for entry in data["points"]:
            point = Point.from_json(entry)
            state.points[(point.variant, point.concurrency)] = point
        return state


def save(state: RunState, directory: Path) -> None:
    """Atomically: a run killed mid-write leaves the previous checkpoint."""
    path = directory / FILENAME
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(state.to_json(), indent=1))
    os.replace(temporary, path)


class CheckpointError(Exception):
    pass


def load(directory: Path, model: str, fingerprint: dict[str, Any]) -> RunState:
    """The checkpoint in `directory` for a run with this fingerprint; CheckpointError when it is missing,
    unreadable, or from a run of another model or with other measurement settings."""
    path = directory / FILENAME
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"--resume: no checkpoint in {directory}") from None
    except (OSError, ValueError) as error:
        raise CheckpointError(f"--resume: cannot read {path}: {error}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"--resume: {path} is not a checkpoint of this version of modelhost tune")
    try:
        state = RunState.from_json(data)
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointError(f"--resume: {path} is damaged ({error!r})") from None
    if state.model != model:
        raise CheckpointError(
            f"--resume: the checkpoint in {directory} is for model {state.model!r}, not {model!r}"
        )
    changed = sorted(
        k for k in {*fingerprint, *state.fingerprint} if fingerprint.get(k) != state.fingerprint.get(k)
    )
    if changed:
        raise CheckpointError(
            f"--resume: the checkpoint in {directory} was measured with other settings ({', '.join(changed)} "
            "differ); its points would not compare with new ones: use another --output, or --overwrite"
        )
    state.runs += 1
    return state
