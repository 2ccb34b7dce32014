"""The deployment file: which models share a deployment, their replicas and resources, and its errors."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import modelhost
from modelhost.cluster.plan import DEFAULT_ACTOR, PlanError, plan_from, read_plan

MODELS = ["a", "b", "c", "d"]
EXAMPLES = Path(modelhost.__file__).parent / "examples"


def _plan(document: Any) -> Any:
    return plan_from(["/repo"], document, MODELS)


def test_without_a_file_every_model_is_its_own_deployment() -> None:
    plan = _plan({})
    assert [(s.name, s.models) for s in plan.deployments] == [(m, (m,)) for m in MODELS]
    options = plan.deployments[0].deployment_options()
    assert plan.deployments[0].actor == DEFAULT_ACTOR
    assert options["ray_actor_options"] == {"num_cpus": 0.25}  # a memory still to measure reserves none
    assert options["autoscaling_config"]["max_replicas"] >= 1
    assert "num_replicas" not in options


def test_groups_defaults_and_the_long_tail() -> None:
    plan = _plan(
        {
            "defaults": {"actor": {"num_cpus": 0.5, "memory": "1Gi"}, "num_replicas": 2},
            "deployments": {
                "pair": {"models": ["a", "b"], "autoscaling": {"min_replicas": 1, "max_replicas": 5}},
                "tail": {"models": ["*"], "max_models_per_replica": 1, "actor": {"num_gpus": 1}},
            },
        }
    )
    pair, tail = plan.deployments
    assert pair.models == ("a", "b") and pair.num_replicas is None
    assert pair.deployment_options()["autoscaling_config"]["max_replicas"] == 5
    assert pair.actor == {"num_cpus": 0.5, "memory": 2**30}
    assert tail.models == ("c", "d") and tail.multiplexed and tail.max_models_per_replica == 1
    assert tail.deployment_options()["num_replicas"] == 2
    assert tail.actor == {"num_cpus": 0.5, "memory": 2**30, "num_gpus": 1}
    assert plan.deployment_of("d") is tail and plan.deployment_of("x") is None
    assert plan.single("x").models == ("x",) and plan.single("x").num_replicas == 2


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "must be a mapping"),
        ({"deploy": {}}, "unknown key(s) deploy"),
        (
            {"deployments": {"g": {"models": ["zz"]}}},
            "names model 'zz', which is not in the model repositories",
        ),
        (
            {"deployments": {"g": {"models": ["a"]}, "h": {"models": ["a"]}}},
            "model 'a' is in two deployments",
        ),
        ({"deployments": {"g": {"models": []}}}, "'models' must be a non-empty list"),
        ({"deployments": {"g": {"models": ["*", "a"]}}}, "'*' stands for every other model"),
        (
            {"deployments": {"g": {"models": ["*"]}, "h": {"models": ["*"]}}},
            "only one deployment may take '*'",
        ),
        (
            {"deployments": {"g": {"models": ["a"], "num_replicas": 0}}},
            "'num_replicas' must be a positive integer",
        ),
        (
            {"deployments": {"g": {"models": ["a"], "num_replicas": 1, "autoscaling": {}}}},
            "give 'num_replicas' or 'autoscaling', not both",
        ),
        (
            {"deployments": {"g": {"models": ["a"], "autoscaling": {"min_replicas": 3, "max_replicas": 2}}}},
            "'min_replicas' (3) is above 'max_replicas' (2)",
        ),
        ({"deployments": {"g": {"models": ["a"], "autoscaling": {"speed": 1}}}}, "unknown key(s) speed"),
        (
            {"deployments": {"g": {"models": ["a"], "actor": {"num_cpus": -1}}}},
            "'num_cpus' must be a number >= 0",
        ),
        ({"deployments": {"g": {"models": ["a"], "actor": {"memory": "lots"}}}}, "size such as 512Mi"),
        ({"deployments": {"b": {"models": ["a"]}}}, "would get a deployment of its own named 'b'"),
        (
            {"defaults": {"server": {"model_control_mode": "poll"}}},
            "'model_control_mode' is set by the cluster",
        ),
        ({"defaults": {"server": {"no_such_option": 1}}}, "unknown server option 'no_such_option'"),
        (
            {"deployments": {"g": {"models": ["a"], "server": {"allow_http": True}}}},
            "deployment 'g': 'server': 'allow_http' is set by the cluster",
        ),
        (
            {"deployments": {"g": {"models": ["a"], "server": [1]}}},
            "deployment 'g': 'server' must be a mapping",
        ),
        (
            {"deployments": {"g": {"models": ["a"], "server": {"model_memory_budget": "1Gi"}}}},
            "deployment 'g': 'server': server option 'model_memory_budget': '1Gi' is not a value it takes",
        ),
        (
            {"defaults": {"server": {"model_memory_budget": -1}}},
            "server option 'model_memory_budget': --model-memory-budget must be more than 0 bytes",
        ),
    ],
)
def test_errors_name_what_is_wrong(document: Any, message: str) -> None:
    with pytest.raises(PlanError) as e:
        _plan(document)
    assert message in str(e.value)


def test_a_deployments_server_options_go_over_the_defaults() -> None:
    from modelhost.cluster.apps import settings_of

    tail_settings = {"models": ["*"], "max_models_per_replica": 2, "server": {"model_memory_budget": 1 << 28}}
    plan = _plan(
        {
            "defaults": {"server": {"exit_timeout_secs": 5, "model_memory_budget": 1 << 30}},
            "deployments": {"tail": tail_settings},
        }
    )
    (tail,) = plan.deployments
    assert tail.server == {"model_memory_budget": 1 << 28}
    assert "server" not in tail.deployment_options()  # the replicas' engine's, not Ray's
    settings = settings_of(plan, tail, {}, 0, "token")
    assert settings.server_options == {"exit_timeout_secs": 5, "model_memory_budget": 1 << 28}


def test_read_from_yaml_against_a_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    for name in ("x", "y"):
        (repo / name).mkdir(parents=True)
    (repo / ".hidden").mkdir()
    path = tmp_path / "deployments.yaml"
    path.write_text("deployments:\n  both:\n    models: [x, y]\n    max_ongoing_requests: 8\n")
    plan = read_plan([str(repo)], path)
    assert plan.repository_models == ("x", "y")
    assert [(s.name, s.models, s.max_ongoing_requests) for s in plan.deployments] == [("both", ("x", "y"), 8)]
    path.write_text("deployments: [oops")
    with pytest.raises(PlanError, match="not YAML"):
        read_plan([str(repo)], path)
    with pytest.raises(PlanError, match="cannot read the deployment file"):
        read_plan([str(repo)], tmp_path / "missing.yaml")
    with pytest.raises(PlanError, match="does not exist"):
        read_plan([str(tmp_path / "nothing")], None)


def test_an_ensembles_steps_run_where_their_models_are_deployed(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    shutil.copytree(EXAMPLES / "simple_ensemble", repo / "simple_ensemble")
    plan = read_plan([str(repo)], None)
    assert plan.steps == {"simple_ensemble": ("simple",)}  # from its config file, each model once
    simple, ensemble = plan.deployments
    assert plan.external_of(ensemble) == (simple,)  # each its own deployment: the steps go to `simple`'s
    assert plan.external_of(simple) == ()
    path = tmp_path / "deployments.yaml"
    path.write_text("deployments:\n  both:\n    models: [simple, simple_ensemble]\n")
    (both,) = read_plan([str(repo)], path).deployments
    assert read_plan([str(repo)], path).external_of(both) == ()  # grouped: the steps run in its replicas
    # A model no deployment serves now (unloaded) loads with the ensemble, as on one server.
    assert plan.external_of(ensemble, lambda model: None) == ()


def test_steps_of_an_ensemble_loaded_with_another_are_followed() -> None:
    document = {"deployments": {"outer": {"models": ["a", "b"]}}}
    plan = plan_from(["/repo"], document, MODELS, {"a": ("b", "c"), "b": ("d",)})
    outer, c, d = plan.deployments
    assert plan.external_of(outer) == (c, d)  # b loads in `outer` with a, and b's step goes to d's deployment


def test_measured_memory_sizes_each_deployments_replicas() -> None:
    from modelhost.cluster.sizing import MARGIN, REPLICA_FLOOR, sized

    plan = _plan(
        {
            "deployments": {
                "pair": {"models": ["a", "b"]},
                "tail": {"models": ["*"], "max_models_per_replica": 1},
                "fixed": {"models": ["d"], "actor": {"memory": "1G"}},
            }
        }
    )
    mib = 1 << 20
    by_name = {s.name: s for s in sized(plan, {"a": 100 * mib, "b": 50 * mib, "c": 30 * mib}).deployments}
    pair, tail, fixed = by_name["pair"], by_name["tail"], by_name["fixed"]
    assert pair.actor["memory"] == int(150 * mib * MARGIN) + REPLICA_FLOOR  # both models in each replica
    assert tail.models == ("c",) and tail.actor["memory"] == int(30 * mib * MARGIN) + REPLICA_FLOOR
    assert fixed.actor["memory"] == 10**9  # the file's own figure
    (unmeasured,) = sized(_plan({"deployments": {"g": {"models": ["*"]}}}), {}).deployments
    assert "memory" not in unmeasured.actor  # nothing measured: nothing reserved
    (none,) = _plan(
        {"defaults": {"actor": {"memory": None}}, "deployments": {"g": {"models": ["*"]}}}
    ).deployments
    assert "memory" not in none.actor
