"""builder.py: a version's configuration (repository agents, overrides), its instance plan, its build from a
backend (retries, out of memory, the memory budget), load faults as errors, what makes a reload rebuild a version,
an ensemble's version and labels, and instance updates in place."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToJson

from engine.registry.registry_fakes import FAKE_MODEL, FakeBackend, FakeInstance, config, entry, write_model
from modelhost.backends.api import BackendServices
from modelhost.engine.model import LoadedModel
from modelhost.engine.registry.budget import MemoryBudget
from modelhost.engine.registry.builder import (
    VersionBuilder,
    instance_plan,
    load_error,
    same_but_version_policy,
)
from modelhost.engine.registry.entries import LoadSettings, ModelState
from modelhost.engine.registry.table import ModelTable
from modelhost.engine.scheduling.rate_limiter import RateLimiter
from modelhost.errors import InvalidArgument, ModelConfigError, ModelhostError, OutOfMemory, Unsupported
from modelhost.repository.overrides import LoadOverride


def on_loop(
    body: Callable[[VersionBuilder], Awaitable[None]], budget: int | None = None, **settings: Any
) -> None:
    """Run `body` with a builder of these settings (and a budget of `budget` bytes), on an event loop."""

    async def main() -> None:
        table = ModelTable()
        fitting = MemoryBudget(budget, table, "explicit") if budget is not None else None
        await body(VersionBuilder(LoadSettings(**settings), table, BackendServices(), fitting))

    asyncio.run(main())


def groups(count: int) -> str:
    return f"instance_group [ {{ count: {count} kind: KIND_CPU }} ]"


def instances(model: LoadedModel) -> list[FakeInstance]:
    return [i for i in model.pool.instances if isinstance(i, FakeInstance)]


# -- the configuration ---------------------------------------------------------------------------------------


def test_the_repository_s_config_is_read_completed(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "m")
    builder = VersionBuilder(LoadSettings(), ModelTable(), BackendServices(), None)
    read = builder.read_config(model_dir, None, "m")
    assert read.backend == "regfake"
    cpu = read.instance_group[0].KIND_CPU
    assert [(g.name, g.count, g.kind) for g in read.instance_group] == [("m", 1, cpu)]
    assert read.version_policy.WhichOneof("policy_choice") == "latest"


def test_an_override_replaces_the_repository_s_config(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "m")
    builder = VersionBuilder(LoadSettings(), ModelTable(), BackendServices(), None)
    override = LoadOverride(config_json=MessageToJson(config(f"{FAKE_MODEL} {groups(3)}")))
    assert builder.read_config(model_dir, override, "m").instance_group[0].count == 3


def test_the_repository_agents_the_config_names_are_run(tmp_path: Path) -> None:
    agents = 'model_repository_agents { agents [ { name: "encryption" } ] }'
    model_dir = write_model(tmp_path, "m", (1,), agents)
    builder = VersionBuilder(LoadSettings(), ModelTable(), BackendServices(), None)
    with pytest.raises(Unsupported, match=r"^repository agent 'encryption' is not available"):
        builder.run_agents(model_dir, None, "m")
    override = LoadOverride(config_json=MessageToJson(config(FAKE_MODEL)))
    builder.run_agents(model_dir, override, "m")  # the override's config names none
    (model_dir / "config.pbtxt").unlink()
    builder.run_agents(model_dir, None, "m")  # no config file: no agent named


# -- a version with instances --------------------------------------------------------------------------------


def test_a_version_is_built_from_the_backend_s_instances(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="modelhost.registry")
    model_dir = write_model(tmp_path, "m", (1,), groups(2))
    backend = FakeBackend()

    async def body(builder: VersionBuilder) -> None:
        cfg = builder.read_config(model_dir, None, "m")
        model = await builder.build("m", 1, model_dir, cfg, backend, "")
        assert (model.name, model.version, model.model_dir, model.cache_name) == ("m", 1, model_dir, "m")
        assert instances(model) == backend.instances and len(model.placements) == 2
        assert backend.loads == [("m", 1, "m_0", 0), ("m", 1, "m_0", 1)]
        model.close()

    on_loop(body)
    assert "loading: m:1" in caplog.messages  # Triton's line, which log scrapers wait for
    assert any(m.startswith("loaded 'm' version 1 (") for m in caplog.messages)


def test_a_namespaced_model_is_built_under_its_name_and_cached_under_its_namespace(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "m")
    backend = FakeBackend()

    async def body(builder: VersionBuilder) -> None:
        cfg = builder.read_config(model_dir, None, "m")
        model = await builder.build(str(model_dir), 1, model_dir, cfg, backend, str(tmp_path))
        assert model.name == "m" and backend.loads[0][0] == "m"
        assert (model.stats.namespace, model.cache_name) == (str(tmp_path), f"{tmp_path}/m")
        model.close()

    on_loop(body)


def test_a_failed_build_is_tried_again_load_retries_times(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model_dir = write_model(tmp_path, "m")
    backend = FakeBackend(ModelhostError("flaky"), ModelhostError("flaky"))

    async def body(builder: VersionBuilder) -> None:
        cfg = builder.read_config(model_dir, None, "m")
        model = await builder.build("m", 1, model_dir, cfg, backend, "")
        assert len(backend.loads) == 3 and len(instances(model)) == 1
        model.close()

    on_loop(body, load_retries=2)
    assert [m for m in caplog.messages if "attempt" in m] == [
        "loading 'm' version 1 failed (attempt 1 of 3): flaky",
        "loading 'm' version 1 failed (attempt 2 of 3): flaky",
    ]


def test_the_last_failure_fails_the_version_once_the_retries_are_spent(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "m")
    backend = FakeBackend(ModelhostError("first"), RuntimeError("second"), None)

    async def body(builder: VersionBuilder) -> None:
        cfg = builder.read_config(model_dir, None, "m")
        with pytest.raises(ModelhostError) as failed:
            await builder.build("m", 1, model_dir, cfg, backend, "")
        assert str(failed.value) == "RuntimeError: second"  # a fault of the backend, in its words
        assert len(backend.loads) == 2

    on_loop(body, load_retries=1)


def test_out_of_memory_is_not_tried_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model_dir = write_model(tmp_path, "m")
    backend = FakeBackend(MemoryError())

    async def body(builder: VersionBuilder) -> None:
        cfg = builder.read_config(model_dir, None, "m")
        with pytest.raises(OutOfMemory, match=r"^MemoryError: out of memory while loading 'm' version 1$"):
            await builder.build("m", 1, model_dir, cfg, backend, "")
        assert len(backend.loads) == 1

    on_loop(body, load_retries=3)
    assert not [m for m in caplog.messages if "attempt" in m]


def test_the_instances_built_are_closed_when_a_later_one_fails(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "m", (1,), groups(3))
    backend = FakeBackend(None, None, ModelConfigError("no such device"))

    async def body(builder: VersionBuilder) -> None:
        cfg = builder.read_config(model_dir, None, "m")
        with pytest.raises(ModelConfigError, match="no such device"):
            await builder.build("m", 1, model_dir, cfg, backend, "")

    on_loop(body)
    assert len(backend.instances) == 2 and all(i.closed for i in backend.instances)


def test_the_budget_refuses_a_version_that_could_never_fit_before_building_it(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "m")
    (model_dir / "1" / "model.bin").write_bytes(bytes(100))
    backend = FakeBackend()

    async def body(builder: VersionBuilder) -> None:
        cfg = builder.read_config(model_dir, None, "m")
        with pytest.raises(OutOfMemory) as refused:
            await builder.build("m", 1, model_dir, cfg, backend, "")
        assert str(refused.value).startswith(
            "model 'm' version 1 needs at least 100 bytes of memory and does not fit in "
            "--model-memory-budget=10: 0 bytes are taken"
        )

    on_loop(body, budget=10, load_retries=2)
    assert backend.loads == []  # not built, and not tried again


def test_the_budget_learns_what_a_version_took(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "m")

    async def body(builder: VersionBuilder) -> None:
        cfg = builder.read_config(model_dir, None, "m")
        model = await builder.build("m", 1, model_dir, cfg, FakeBackend(), "")
        assert builder.budget is not None
        assert builder.budget.last_size == {"m": model.stats.memory_bytes}  # the next load's estimate
        model.close()

    on_loop(body, budget=1 << 40)


# -- an ensemble ---------------------------------------------------------------------------------------------


def test_an_ensemble_output_classifies_with_the_labels_of_the_step_output_it_comes_from(
    tmp_path: Path,
) -> None:
    a_dir = tmp_path / "a"
    (a_dir / "1").mkdir(parents=True)
    (a_dir / "labels.txt").write_text("cat\ndog\n")
    (a_dir / "config.pbtxt").write_text(
        'name: "a" backend: "regfake" max_batch_size: 0 '
        'input [ { name: "I" data_type: TYPE_FP32 dims: [ 2 ] } ] '
        'output [ { name: "O" data_type: TYPE_FP32 dims: [ 2 ] label_filename: "labels.txt" } ]'
    )
    e_dir = tmp_path / "e"
    (e_dir / "1").mkdir(parents=True)
    (e_dir / "config.pbtxt").write_text(
        'name: "e" platform: "ensemble" max_batch_size: 0 response_cache { enable: true } '
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ] '
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ] '
        'ensemble_scheduling { step [ { model_name: "a" model_version: -1 '
        'input_map { key: "I" value: "X" } output_map { key: "O" value: "Y" } } ] }'
    )
    table = ModelTable()
    builder = VersionBuilder(LoadSettings(response_cache=True), table, BackendServices(), None)
    composing = {"a": builder.read_config(a_dir, None, "a")}
    table.models["a"] = entry("a", (1, ModelState.READY, None), cfg=composing["a"])
    table.models["a"].model_dir = a_dir
    model = builder.build_ensemble("e", 1, e_dir, builder.read_config(e_dir, None, "e"), composing, "")
    assert model.ensemble is not None and model.labels["Y"] == ["cat", "dog"]
    policy = model.config.model_transaction_policy
    assert model.config.HasField("model_transaction_policy") and not policy.decoupled
    assert model.stats.cached  # not decoupled: its answers are cached


# -- instance updates in place -------------------------------------------------------------------------------


def read(builder: VersionBuilder, repo: Path, extra: str) -> Any:
    """The completed config of a model "m" whose config adds `extra` (in a repository of its own)."""
    return builder.read_config(write_model(repo, "m", (1,), extra), None, "m")


def test_only_a_change_of_the_instance_groups_updates_a_version_in_place(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path / "repo", "m", (1,), groups(1))

    async def body(builder: VersionBuilder) -> None:
        model = await built(builder, model_dir, FakeBackend())
        old = model.config
        assert builder.regroups_in_place(model, old, read(builder, tmp_path / "more", groups(2)))
        assert not builder.regroups_in_place(model, old, read(builder, tmp_path / "same", groups(1)))
        other = read(builder, tmp_path / "other", f"{groups(2)} dynamic_batching {{ }}")
        assert not builder.regroups_in_place(model, old, other)  # loaded anew
        assert not builder.regroups_in_place(None, old, read(builder, tmp_path / "none", groups(2)))
        model.close()

    on_loop(body)


def built(builder: VersionBuilder, model_dir: Path, backend: FakeBackend) -> Awaitable[LoadedModel]:
    return builder.build("m", 1, model_dir, builder.read_config(model_dir, None, "m"), backend, "")


def test_a_version_grows_new_instances_beside_those_serving(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="modelhost.registry")
    model_dir = write_model(tmp_path / "repo", "m", (1,), groups(1))
    backend = FakeBackend()

    async def body(builder: VersionBuilder) -> None:
        model = await built(builder, model_dir, backend)
        serving = instances(model)
        await builder.regroup(model, read(builder, tmp_path / "more", groups(3)), backend)
        assert instances(model)[0] is serving[0] and not serving[0].closed
        assert sorted(i.name for i in instances(model)) == ["m_0_0", "m_0_1", "m_0_2"]
        assert model.config.instance_group[0].count == 3 and len(model.placements) == 3
        model.close()

    on_loop(body)
    assert "updated the instances of 'm' version 1: 2 added, 0 removed" in caplog.messages


def test_a_version_closes_the_instances_its_groups_no_longer_ask_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="modelhost.registry")
    model_dir = write_model(tmp_path / "repo", "m", (1,), groups(3))
    backend = FakeBackend()

    async def body(builder: VersionBuilder) -> None:
        model = await built(builder, model_dir, backend)
        await builder.regroup(model, read(builder, tmp_path / "fewer", groups(1)), backend)
        assert len(instances(model)) == 1 and len(model.placements) == 1
        # Closed by the time it returns (none of them holds a sequence).
        assert sorted(i.closed for i in backend.instances) == [False, True, True]
        model.close()

    on_loop(body)
    assert "updated the instances of 'm' version 1: 0 added, 2 removed" in caplog.messages


def test_a_version_whose_new_instance_fails_serves_on_as_it_was(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path / "repo", "m", (1,), groups(1))
    backend = FakeBackend(None, None, ModelConfigError("no such device"))

    async def body(builder: VersionBuilder) -> None:
        model = await built(builder, model_dir, backend)
        with pytest.raises(ModelConfigError, match="no such device"):
            await builder.regroup(model, read(builder, tmp_path / "more", groups(3)), backend)
        assert instances(model) == backend.instances[:1] and model.config.instance_group[0].count == 1
        assert backend.instances[1].closed  # built for the update, closed with it
        model.close()

    on_loop(body)


def test_new_instances_the_rate_limiter_cannot_serve_are_closed_and_nothing_changes(tmp_path: Path) -> None:
    needing = (
        "instance_group [ {{ count: {} kind: KIND_CPU "
        'rate_limiter {{ resources [ {{ name: "R" count: {} }} ] }} }} ]'
    )
    model_dir = write_model(tmp_path / "repo", "m", (1,), needing.format(1, 1))
    backend = FakeBackend()

    async def body(builder: VersionBuilder) -> None:
        model = await built(builder, model_dir, backend)
        more = read(builder, tmp_path / "more", needing.format(2, 3))  # R is limited to 2
        with pytest.raises(ModelConfigError, match=r'^Resource count for "R" is limited to 2 '):
            await builder.regroup(model, more, backend)
        assert instances(model) == backend.instances[:1] and model.config.instance_group[0].count == 1
        assert all(i.closed for i in backend.instances[1:]) and len(backend.instances) == 3
        model.close()

    on_loop(body, rate_limiter=RateLimiter([("R", 2, None)]))


def test_the_instance_plan_places_each_instance() -> None:
    cpu_gpu = config(
        "instance_group [ { count: 2 kind: KIND_CPU }, { count: 1 kind: KIND_GPU gpus: [1, 3] } ]"
    )
    plan = [(group.kind, index, device) for group, index, device in instance_plan(cpu_gpu, gpu_count=4)]
    assert plan == [(2, 0, 0), (2, 1, 0), (1, 0, 1), (1, 0, 3)]
    every_gpu = config("instance_group [ { count: 1 kind: KIND_GPU } ]")
    assert [d for _, _, d in instance_plan(every_gpu, gpu_count=2)] == [0, 1]


def test_only_a_change_besides_the_version_policy_rebuilds_a_version() -> None:
    base = config('backend: "onnxruntime" max_batch_size: 4')
    assert same_but_version_policy(
        base, config('backend: "onnxruntime" max_batch_size: 4 version_policy { all {} }')
    )
    assert not same_but_version_policy(base, config('backend: "onnxruntime" max_batch_size: 8'))
    assert not same_but_version_policy(None, base)


def test_load_faults_become_errors() -> None:
    assert isinstance(load_error("m", 1, MemoryError()), OutOfMemory)
    refused = InvalidArgument("bad input dims")
    assert load_error("m", 1, refused) is refused
    fault = load_error("m", 1, RuntimeError("boom"))
    assert type(fault) is ModelhostError and str(fault) == "RuntimeError: boom"
