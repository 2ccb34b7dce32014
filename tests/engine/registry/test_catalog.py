"""catalog.py: the repositories' model directories by name (registered models first), --model-namespacing's
keys for a name several repositories hold, an ensemble's steps as keys, and what a load sees of a model's
files."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from engine.registry.registry_fakes import ensemble, write_model
from modelhost.engine.registry.catalog import Catalog
from modelhost.engine.registry.entries import LoadSettings
from modelhost.errors import InvalidArgument, ModelConfigError
from modelhost.repository.errors import RepositoryError
from modelhost.repository.sources import open_repository


def synced(*repos: Path, namespacing: bool = False) -> Catalog:
    catalog = Catalog(
        [open_repository(str(r)) for r in repos], LoadSettings(namespacing=namespacing), ambiguous={}
    )
    asyncio.run(catalog.sync(strict=True))
    return catalog


@pytest.fixture
def two(tmp_path: Path) -> tuple[Path, Path]:
    """Two repositories: `shared` in both, `a` in the first, `b` in the second."""
    first, second = tmp_path / "first", tmp_path / "second"
    for repo, own in ((first, "a"), (second, "b")):
        write_model(repo, own)
        write_model(repo, "shared")
    return first, second


def test_scan_finds_the_models_of_every_repository(two: tuple[Path, Path]) -> None:
    first, second = two
    catalog = synced(first, second)
    assert catalog.roots == [first, second]
    assert catalog.scan() == {
        "a": [first / "a"],
        "shared": [first / "shared", second / "shared"],
        "b": [second / "b"],
    }
    assert catalog.ambiguous == {}  # without --model-namespacing a shared name is an error at load


def test_the_directory_of_a_model_in_none_or_several_repositories_is_an_error(two: tuple[Path, Path]) -> None:
    first, second = two
    scanned = synced(first, second).scan()
    assert Catalog.model_dir("a", scanned["a"]) == first / "a"
    with pytest.raises(InvalidArgument) as several:
        Catalog.model_dir("shared", scanned["shared"])
    assert str(several.value) == f"model 'shared' appears in multiple model repositories: {first}, {second}"
    with pytest.raises(InvalidArgument, match=r"^model not found in any model repository$"):
        Catalog.model_dir("gone", [])


def test_a_registered_model_takes_precedence_over_the_repositories(
    tmp_path: Path, two: tuple[Path, Path]
) -> None:
    catalog = synced(*two)
    elsewhere = write_model(tmp_path / "registered", "a")
    catalog.registered["a"] = elsewhere
    catalog.registered["c"] = elsewhere
    scanned = catalog.scan()
    assert scanned["a"] == [elsewhere] and scanned["c"] == [elsewhere]


def test_namespacing_keys_each_repository_s_model_of_a_shared_name(two: tuple[Path, Path]) -> None:
    first, second = two
    catalog = synced(first, second, namespacing=True)
    shared = catalog.ambiguous  # the table's: a request for the bare name is ambiguous
    keys = [str(first / "shared"), str(second / "shared")]
    scanned = catalog.scan()
    assert sorted(scanned) == sorted(["a", "b", *keys])
    assert scanned[keys[0]] == [first / "shared"]
    assert catalog.ambiguous is shared and shared == {"shared": keys}
    assert catalog.keys_of("shared") == keys
    assert catalog.keys_of("a") == ["a"]
    assert catalog.namespace(first / "a") == str(first)
    shutil.rmtree(second / "shared")
    assert catalog.keys_now("shared") == ["shared"]  # after a scan: one repository's again
    assert shared == {}


def test_a_namespace_only_under_namespacing(two: tuple[Path, Path]) -> None:
    first, _ = two
    assert synced(first).namespace(first / "a") == ""


def test_an_ensemble_step_naming_a_shared_model_is_its_own_repository_s(two: tuple[Path, Path]) -> None:
    first, second = two
    catalog = synced(first, second, namespacing=True)
    catalog.scan()
    config = ensemble("e", "shared", "a")
    catalog.resolve_steps(config, first / "e")
    assert [s.model_name for s in config.ensemble_scheduling.step] == [str(first / "shared"), "a"]


def test_a_shared_model_not_in_the_ensemble_s_repository_is_ambiguous(
    tmp_path: Path, two: tuple[Path, Path]
) -> None:
    catalog = synced(*two, namespacing=True)
    catalog.scan()
    with pytest.raises(ModelConfigError) as refused:
        catalog.resolve_steps(ensemble("e", "shared"), tmp_path / "third" / "e")
    assert str(refused.value) == "ensemble e contains models that are not available or ambiguous: shared"


def test_steps_without_shared_names_stay_as_written(two: tuple[Path, Path]) -> None:
    first, _ = two
    catalog = synced(first)
    config = ensemble("e", "shared")
    catalog.resolve_steps(config, first / "e")
    assert [s.model_name for s in config.ensemble_scheduling.step] == ["shared"]


def test_steps_in_files_are_keys_under_namespacing(two: tuple[Path, Path]) -> None:
    first, second = two
    (first / "e").mkdir()
    (first / "e" / "config.pbtxt").write_text(str(ensemble("e", "shared", "a")))
    plain = synced(first, second)
    assert plain.steps_in_files("e", plain.scan()) == ["shared", "a"]
    spaced = synced(first, second, namespacing=True)
    assert spaced.steps_in_files("e", spaced.scan()) == [str(first / "shared"), "a"]
    assert spaced.steps_in_files("gone", spaced.scan()) == []


def test_look_changes_with_the_files(two: tuple[Path, Path]) -> None:
    first, second = two

    async def run() -> None:
        before = await Catalog.look([first / "a"])
        assert before[0] == (first / "a",) and before[1] is not None and list(before[1].versions) == [1]
        assert await Catalog.look([first / "a"]) == before
        (first / "a" / "2").mkdir()
        assert await Catalog.look([first / "a"]) != before
        assert (await Catalog.look([first / "shared", second / "shared"]))[1] is None  # no one directory

    asyncio.run(run())


def test_a_repository_gone_keeps_its_copy_on_a_poll_and_fails_a_strict_sync(
    two: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    first, second = two
    catalog = synced(first, second)
    shutil.rmtree(second)
    asyncio.run(catalog.sync(strict=False))
    assert catalog.roots == [first, second]
    assert any(m.startswith(f"failed to poll model repository {second}: ") for m in caplog.messages)
    with pytest.raises(RepositoryError):
        asyncio.run(catalog.sync(strict=True))
    # Its copy cannot be read either: the scan logs it and goes on with the others.
    assert sorted(catalog.scan()) == ["a", "shared"]
    assert any(m.startswith(f"failed to read model repository {second}: ") for m in caplog.messages)


def test_a_repository_never_read_fails_even_a_poll(tmp_path: Path) -> None:
    catalog = Catalog([open_repository(str(tmp_path / "missing"))], LoadSettings(), {})
    with pytest.raises(RepositoryError, match="the model repository directory does not exist"):
        asyncio.run(catalog.sync(strict=False))
    assert catalog.roots == []
