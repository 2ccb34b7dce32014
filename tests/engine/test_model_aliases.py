"""SageMaker's model aliases (engine/model_aliases.py): names registered under an alias point at their directories
in the registry until the alias is forgotten; a taken alias or name is a conflict."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from modelhost.engine.model_aliases import ModelAliases
from modelhost.engine.registry.registry import ModelRegistry
from modelhost.errors import Conflict


def registry(repository: tuple[str, ...] = (), serving: tuple[str, ...] = ()) -> Any:
    """What the aliases use of a registry: its registered names, a scan of its repositories, its models."""
    fake = SimpleNamespace(registered={}, models={n: SimpleNamespace(serving=lambda: [1]) for n in serving})
    fake.scan = lambda: {**{n: [Path("/repo") / n] for n in repository}, **fake.registered}
    return fake


def test_an_alias_registers_its_names_until_it_is_forgotten() -> None:
    reg = registry()
    aliases = ModelAliases(cast(ModelRegistry, reg))
    aliases.register("mme", "s3://b/m.tar.gz", {"m": "/opt/m", "m_step": "/opt/m_step"})
    assert reg.registered == {"m": Path("/opt/m"), "m_step": Path("/opt/m_step")}
    entry = {"target": "m", "url": "s3://b/m.tar.gz", "names": ["m", "m_step"]}
    assert aliases.get() == {"mme": entry} and aliases.get("mme") == {"mme": entry}
    assert aliases.get("other") == {}
    aliases.forget("mme")
    aliases.forget("mme")  # unknown: nothing to do
    assert reg.registered == {} and aliases.get() == {}


def test_a_taken_alias_or_name_is_a_conflict() -> None:
    reg = registry(repository=("in_repo",), serving=("loaded",))
    aliases = ModelAliases(cast(ModelRegistry, reg))
    aliases.register("a", "u", {"m": "/opt/m"})
    with pytest.raises(Conflict, match="failed to register 'x', there is a conflicting mapping for 'x'"):
        aliases.register("a", "u", {"x": "/opt/x"})
    with pytest.raises(Conflict, match="conflicting mapping for 'm'"):
        aliases.register("b", "u", {"m": "/opt/m2"})
    with pytest.raises(Conflict, match=r"failed to register 'in_repo', 'loaded': a model of that name is already"):
        aliases.register("b", "u", {"first": "/opt/f", "in_repo": "/opt/r", "loaded": "/opt/l"})
    aliases.register("c", "u", {"in_repo": "/opt/r"})  # the first name may shadow a repository model
    assert reg.registered["in_repo"] == Path("/opt/r") and "first" not in reg.registered
