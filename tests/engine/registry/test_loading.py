"""loading.py: one load of one model, in its phases (read, choose versions, build or keep, then keep what
served on a failure or commit), over a repository of FakeBackend's models; and `record_failure`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToJson

from engine.registry.registry_fakes import FAKE_MODEL, FakeInstance, config, entry, ready, write_model
from modelhost.backends import registry as backends
from modelhost.backends.api import BackendServices
from modelhost.engine.model import LoadedModel
from modelhost.engine.registry.builder import VersionBuilder
from modelhost.engine.registry.catalog import Catalog, Scanned
from modelhost.engine.registry.ensembles import EnsembleGraph
from modelhost.engine.registry.entries import UNLOADED, LoadSettings, ModelState, VersionEntry
from modelhost.engine.registry.loading import ModelLoad, record_failure
from modelhost.engine.registry.table import ModelTable
from modelhost.errors import InvalidArgument, ModelhostError, OutOfMemory
from modelhost.repository.overrides import LoadOverride
from modelhost.repository.sources import open_repository


@pytest.fixture(autouse=True)
def fake_backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Models of backend "regfake" are FakeBackend's (only while the test runs)."""
    monkeypatch.setitem(
        backends._BACKENDS, "regfake", backends.BackendEntry("engine.registry.registry_fakes:FakeBackend")
    )
    yield


class Parts:
    """What a load works with, over one repository, wired as the registry wires them."""

    def __init__(self, repo: Path, settings: LoadSettings) -> None:
        services = BackendServices()
        self.table = ModelTable()
        self.catalog = Catalog([open_repository(str(repo))], settings, self.table.ambiguous)
        self.builder = VersionBuilder(settings, self.table, services, None)
        self.graph = EnsembleGraph(self.table, self.catalog, services, self.run, self.run_quietly)

    async def run(self, name: str, scanned: Scanned, override: LoadOverride | None) -> None:
        await ModelLoad(name, scanned, override, self.table, self.catalog, self.builder, self.graph).run()

    async def run_quietly(self, name: str, scanned: Scanned, override: LoadOverride | None) -> None:
        with contextlib.suppress(ModelhostError):
            await self.run(name, scanned, override)

    async def load(self, name: str = "m", override: LoadOverride | None = None) -> LoadedModel:
        """Load `name` from the repository as it is now; the version that serves it then."""
        await self.catalog.sync(strict=True)
        await self.run(name, self.catalog.scan(), override)
        return self.table.get(name)


def scenario(repo: Path, body: Callable[[Parts], Awaitable[None]], **settings: object) -> None:
    """Run `body` on the event loop, then close what it loaded."""

    async def main() -> None:
        parts = Parts(repo, LoadSettings(**settings))  # type: ignore[arg-type]
        try:
            await body(parts)
        finally:
            await parts.table.settled()
            parts.table.close()

    asyncio.run(main())


def instances(model: LoadedModel) -> list[FakeInstance]:
    return [i for i in model.pool.instances if isinstance(i, FakeInstance)]


def unloaded(version: VersionEntry) -> bool:
    return (version.state, version.reason, version.model) == (ModelState.UNAVAILABLE, UNLOADED, None)


def successes(caplog: pytest.LogCaptureFixture) -> int:
    return caplog.messages.count("successfully loaded 'm'")


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="modelhost.registry")
    return caplog


# -- read and choose versions --------------------------------------------------------------------------------


def test_a_load_builds_the_versions_the_policy_names(tmp_path: Path, logs: pytest.LogCaptureFixture) -> None:
    model_dir = write_model(tmp_path, "m", (1, 2, 3), "version_policy { latest { num_versions: 2 } }")

    async def body(parts: Parts) -> None:
        served = await parts.load()
        m = parts.table.models["m"]
        assert {v: e.state for v, e in m.versions.items()} == {2: ModelState.READY, 3: ModelState.READY}
        assert (served.name, served.version, served.model_dir) == ("m", 3, model_dir)
        assert len(instances(served)) == 1
        assert m.model_dir == model_dir and m.error == ""
        assert m.seen == await parts.catalog.look([model_dir])  # what a poll compares with

    scenario(tmp_path, body)
    assert successes(logs) == 1


def test_a_version_missing_from_disk_is_skipped_when_others_load(
    tmp_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    write_model(tmp_path, "m", (1,), "version_policy { specific { versions: [1, 4] } }")

    async def body(parts: Parts) -> None:
        await parts.load()
        assert list(parts.table.models["m"].versions) == [1]
        assert parts.table.all_ready()

    scenario(tmp_path, body)
    assert "version 4 is specified for model 'm', but the version directory is not present" in logs.messages


def test_a_load_fails_when_no_version_the_policy_names_is_on_disk(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "m", (1,), "version_policy { specific { versions: [4] } }")

    async def body(parts: Parts) -> None:
        with pytest.raises(InvalidArgument) as failed:
            await parts.load()
        reason = f"version 4 not found in {model_dir}"
        assert str(failed.value) == f"load failed for model 'm': version 4 is at UNAVAILABLE state: {reason}"
        v4 = parts.table.models["m"].versions[4]
        assert (v4.state, v4.reason) == (ModelState.UNAVAILABLE, reason)

    scenario(tmp_path, body)


def test_a_version_policy_that_yields_no_version_fails_the_load(tmp_path: Path) -> None:
    write_model(tmp_path, "m", ())  # the latest version of none

    async def body(parts: Parts) -> None:
        with pytest.raises(InvalidArgument) as failed:
            await parts.load()
        reason = "at least one version must be available under the version policy of model 'm'"
        assert str(failed.value) == f"load failed for model 'm': {reason}"
        m = parts.table.models["m"]
        assert m.error == reason and m.versions == {}
        assert not parts.table.all_ready()

    scenario(tmp_path, body)


def test_a_model_in_no_repository_leaves_no_entry(tmp_path: Path) -> None:
    async def body(parts: Parts) -> None:
        with pytest.raises(InvalidArgument) as failed:
            await parts.load("gone")
        assert str(failed.value) == (
            "failed to load 'gone', failed to poll from model repository: "
            "model not found in any model repository"
        )
        assert parts.table.models == {}

    scenario(tmp_path, body)


def test_a_config_that_cannot_be_read_is_the_model_s_error(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text("not a config {")

    async def body(parts: Parts) -> None:
        with pytest.raises(InvalidArgument) as failed:
            await parts.load()
        m = parts.table.models["m"]
        assert m.error and m.versions == {}
        assert str(failed.value) == f"failed to load 'm', failed to poll from model repository: {m.error}"

    scenario(tmp_path, body)


def test_a_load_counts_in_a_startup_and_clears_an_eviction_note(tmp_path: Path) -> None:
    write_model(tmp_path, "m")

    async def body(parts: Parts) -> None:
        parts.table.started = set()
        parts.table.models["m"] = entry("m")
        parts.table.models["m"].evicted = "unloaded after 5 s idle"
        await parts.load()
        assert parts.table.started == {"m"} and parts.table.models["m"].evicted == ""

    scenario(tmp_path, body)


# -- reloads: keep, rebuild, or fail and keep serving --------------------------------------------------------


def test_a_reload_with_unchanged_files_keeps_the_serving_version(
    tmp_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    write_model(tmp_path, "m")

    async def body(parts: Parts) -> None:
        first = await parts.load()
        assert await parts.load() is first
        assert instances(first)[0].closed is False

    scenario(tmp_path, body)
    assert successes(logs) == 1  # Triton logs only a load that changed something


def test_a_reload_of_changed_files_builds_the_version_again_and_retires_the_old_one(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "m")

    async def body(parts: Parts) -> None:
        first = await parts.load()
        (model_dir / "1" / "weights").write_bytes(b"new")
        second = await parts.load()
        assert second is not first and second.version == 1
        await parts.table.settled()
        assert instances(first)[0].closed and not instances(second)[0].closed

    scenario(tmp_path, body)


def test_a_commit_retires_a_version_the_policy_no_longer_names(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "m")

    async def body(parts: Parts) -> None:
        first = await parts.load()
        (model_dir / "2").mkdir()
        second = await parts.load()
        m = parts.table.models["m"]
        assert second.version == 2
        v1 = m.versions[1]
        assert v1.state == ModelState.UNLOADING and v1.model is first  # until drained
        await parts.table.settled()
        assert unloaded(m.versions[1])
        assert instances(first)[0].closed
        assert parts.table.all_ready()

    scenario(tmp_path, body)


def test_a_change_of_the_version_policy_alone_keeps_the_version(
    tmp_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    write_model(tmp_path, "m")

    async def body(parts: Parts) -> None:
        first = await parts.load()
        write_model(tmp_path, "m", (1,), "version_policy { all { } }")
        assert await parts.load() is first
        assert first.config.version_policy.WhichOneof("policy_choice") == "all"  # what GET config reports

    scenario(tmp_path, body)
    assert successes(logs) == 2  # the configuration changed


def test_a_change_of_the_instance_groups_alone_updates_the_version_in_place(
    tmp_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    write_model(tmp_path, "m", (1,), "instance_group [ { count: 1 kind: KIND_CPU } ]")

    async def body(parts: Parts) -> None:
        first = await parts.load()
        write_model(tmp_path, "m", (1,), "instance_group [ { count: 3 kind: KIND_CPU } ]")
        assert await parts.load() is first
        assert len(instances(first)) == 3
        assert parts.table.models["m"].config.instance_group[0].count == 3

    scenario(tmp_path, body)
    assert "updated the instances of 'm' version 1: 2 added, 0 removed" in logs.messages


def test_a_reload_that_fails_to_build_keeps_the_old_version_serving(
    tmp_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    model_dir = write_model(tmp_path, "m")

    async def body(parts: Parts) -> None:
        first = await parts.load()
        (model_dir / "1" / "fail").write_text("the model file is broken")
        with pytest.raises(InvalidArgument) as failed:
            await parts.load()
        assert str(failed.value) == (
            "load failed for model 'm': version 1 is at UNAVAILABLE state: the model file is broken"
        )
        assert parts.table.get("m") is first
        assert parts.table.models["m"].versions[1].state == ModelState.READY
        assert not instances(first)[0].closed

    scenario(tmp_path, body)
    assert "failed to reload 'm': the versions loaded before keep serving" in logs.messages


def test_a_new_version_that_fails_beside_a_serving_one_is_recorded(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "m", (1,), "version_policy { all { } }")

    async def body(parts: Parts) -> None:
        first = await parts.load()
        (model_dir / "2").mkdir()
        (model_dir / "2" / "fail").write_text("boom")
        with pytest.raises(InvalidArgument, match=r"version 2 is at UNAVAILABLE state: boom$"):
            await parts.load()
        m = parts.table.models["m"]
        assert parts.table.get("m") is first and m.versions[1].state == ModelState.READY
        assert (m.versions[2].state, m.versions[2].reason) == (ModelState.UNAVAILABLE, "boom")

    scenario(tmp_path, body)


def test_a_reload_that_fails_to_read_keeps_the_old_version_with_the_reason(tmp_path: Path) -> None:
    write_model(tmp_path, "m")
    good = (tmp_path / "m" / "config.pbtxt").read_text()

    async def body(parts: Parts) -> None:
        first = await parts.load()
        (tmp_path / "m" / "config.pbtxt").write_text("not a config {")
        with pytest.raises(InvalidArgument, match=r"^failed to load 'm', failed to poll from model "):
            await parts.load()
        m = parts.table.models["m"]
        assert parts.table.get("m") is first and m.error == ""
        assert m.versions[1].state == ModelState.READY
        assert m.versions[1].reason.startswith("a reload failed: ")
        (tmp_path / "m" / "config.pbtxt").write_text(good)
        assert await parts.load() is first
        assert m.versions[1].reason == ""  # the next load that succeeds clears it

    scenario(tmp_path, body)


def test_out_of_memory_fails_the_load_as_out_of_memory(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "m")
    (model_dir / "1" / "fail").write_text("CUDA out of memory. Tried to allocate 2.00 GiB")

    async def body(parts: Parts) -> None:
        with pytest.raises(OutOfMemory) as failed:
            await parts.load()
        assert str(failed.value) == (
            "load failed for model 'm': version 1 is at UNAVAILABLE state: CUDA out of memory. "
            "Tried to allocate 2.00 GiB"
        )

    scenario(tmp_path, body)


# -- overrides -----------------------------------------------------------------------------------------------


def override_json(extra: str) -> str:
    return str(MessageToJson(config(f"{FAKE_MODEL} {extra}")))


def test_a_config_override_stays_while_the_repository_does_not_change(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "m")

    async def body(parts: Parts) -> None:
        overridden = override_json("instance_group [ { count: 2 kind: KIND_CPU } ]")
        first = await parts.load(override=LoadOverride(config_json=overridden))
        assert len(instances(first)) == 2
        assert await parts.load() is first  # the repository is as it was: the override holds
        assert parts.table.models["m"].retained is not None
        (model_dir / "1" / "weights").write_bytes(b"new")
        fresh = await parts.load()
        assert len(instances(fresh)) == 1 and parts.table.models["m"].retained is None

    scenario(tmp_path, body)


def test_file_overrides_load_from_their_own_directory_until_replaced(tmp_path: Path) -> None:
    write_model(tmp_path, "m")

    async def body(parts: Parts) -> None:
        files = {"1/weights": b"override"}
        first = await parts.load(override=LoadOverride(config_json=override_json(""), files=files))
        m = parts.table.models["m"]
        holder = m.override_dir
        assert holder is not None and m.overridden
        assert first.model_dir == Path(holder.name) / "m" and (first.model_dir / "1" / "weights").is_file()
        again = await parts.load()  # from the repository: its files are not the override's
        assert again is not first and again.model_dir == tmp_path / "m"
        assert not m.overridden and m.override_dir is None
        await parts.table.settled()
        assert not Path(holder.name).exists()

    scenario(tmp_path, body)


# -- an ensemble ---------------------------------------------------------------------------------------------


def test_an_ensemble_loads_its_composing_model_first(tmp_path: Path) -> None:
    write_model(tmp_path, "a")
    (tmp_path / "e" / "1").mkdir(parents=True)
    (tmp_path / "e" / "config.pbtxt").write_text(
        'name: "e" platform: "ensemble" max_batch_size: 0 '
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ] '
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ] '
        'ensemble_scheduling { step [ { model_name: "a" model_version: -1 '
        'input_map { key: "I" value: "X" } output_map { key: "O" value: "Y" } } ] }'
    )

    async def body(parts: Parts) -> None:
        served = await parts.load("e")
        assert served.ensemble is not None
        assert parts.table.models["a"].serving_versions() == [1]
        assert parts.table.models["a"].for_ensemble  # loaded for it, not by name
        assert parts.graph.dependents("a") == ["e"]

    scenario(tmp_path, body)


# -- record_failure ------------------------------------------------------------------------------------------


def test_a_failure_before_any_version_is_the_error_of_a_model_not_serving() -> None:
    m = entry("m", (1, ModelState.UNAVAILABLE, None))
    record_failure(m, "failed to parse the config")
    assert m.error == "failed to parse the config" and m.versions == {}


def test_a_failure_before_any_version_leaves_a_serving_model_serving() -> None:
    m = ready("m", 1)
    m.versions[2] = entry("m", (2, ModelState.UNAVAILABLE, None)).versions[2]
    record_failure(m, "failed to parse the config")
    assert m.error == ""
    assert m.versions[1].state == ModelState.READY
    assert m.versions[1].reason == "a reload failed: failed to parse the config"
    assert m.versions[2].reason == ""  # only the serving versions carry it
