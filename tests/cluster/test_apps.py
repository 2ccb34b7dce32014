"""The Serve config of a plan (a RayService's serveConfigV2) as Ray Serve reads it, and its application builder."""

from __future__ import annotations

from typing import Any

import pytest

from modelhost.cluster.apps import BUILDER, build, serve_config
from modelhost.cluster.plan import plan_from

pytest.importorskip("ray")
# Ray's own pydantic models, imported with ray.serve, use a form pydantic 2 deprecates: Ray's to fix, not ours.
pytestmark = pytest.mark.filterwarnings("ignore:Using extra keyword arguments on `Field`:DeprecationWarning")


def _plan() -> Any:
    document = {
        "defaults": {"actor": {"num_cpus": 0.5}, "server": {"exit_timeout_secs": 5}},
        "deployments": {"tail": {"models": ["*"], "max_models_per_replica": 2, "num_replicas": 3}},
    }
    return plan_from(["s3://bucket/models"], document, ["a", "b"])


def test_the_config_is_one_application_per_deployment_that_ray_serve_accepts() -> None:
    from ray.serve.schema import ServeDeploySchema

    config = serve_config(_plan())
    schema = ServeDeploySchema.model_validate(config)  # Ray Serve's own check of `serve deploy` files
    (tail,) = schema.applications
    assert tail.name == "tail" and tail.import_path == BUILDER and tail.route_prefix is None
    assert tail.args == {
        "deployment": "tail",
        "repositories": ["s3://bucket/models"],
        "models": ["a", "b"],
        "max_models_per_replica": 2,
        "server": {"exit_timeout_secs": 5},
    }
    (deployment,) = tail.deployments
    assert deployment.name == "models" and deployment.num_replicas == 3
    assert deployment.ray_actor_options.num_cpus == 0.5
    assert config["http_options"]["port"] != 8000  # Ray's proxy off modelhost's port


def test_autoscaled_deployments_name_modelhosts_policy() -> None:
    config = serve_config(plan_from(["/m"], {}, ["a"]))
    autoscaling = config["applications"][0]["deployments"][0]["autoscaling_config"]
    assert autoscaling["policy"] == {
        "policy_function": "modelhost.cluster.autoscaling:Policy",
        "policy_kwargs": {},
    }
    queued = plan_from(["/m"], {"defaults": {"autoscaling": {"target_queue_time_ms": 20}}}, ["a"])
    autoscaling = serve_config(queued)["applications"][0]["deployments"][0]["autoscaling_config"]
    assert "target_queue_time_ms" not in autoscaling  # modelhost's key goes to the policy, not to Ray
    assert autoscaling["policy"]["policy_kwargs"] == {"target_queue_time_ms": 20}
    from ray.serve.schema import ServeDeploySchema

    ServeDeploySchema.model_validate(serve_config(queued))


def test_the_builder_makes_the_application_and_refuses_unknown_args() -> None:
    from ray.serve import Application

    application = build({"deployment": "d", "repositories": ["/m"], "models": ["a", "b"]})
    assert isinstance(application, Application)
    with pytest.raises(ValueError, match="unknown modelhost application argument"):
        build({"deployment": "d", "repositories": ["/m"], "models": ["a"], "modles": []})
    with pytest.raises(ValueError, match="needs 'models'"):
        build({"deployment": "d", "repositories": ["/m"]})


def test_an_ensembles_steps_in_other_deployments_travel_in_its_args() -> None:
    document = {"deployments": {"pool": {"models": ["b"], "max_models_per_replica": 1}}}
    plan = plan_from(["/m"], document, ["a", "b", "e"], {"e": ("a", "b")})
    apps = {app["name"]: app for app in serve_config(plan)["applications"]}
    assert apps["e"]["args"]["external"] == [
        {"deployment": "a", "models": ["a"]},
        {"deployment": "pool", "models": ["b"], "max_models_per_replica": 1},
    ]
    assert "external" not in apps["a"]["args"]
    application = build(apps["e"]["args"])
    settings = application._bound_deployment.init_args[0]  # what each replica of the ensemble starts with
    assert [(s.name, s.models, s.max_models_per_replica) for s in settings.external] == [
        ("a", ("a",), 0),
        ("pool", ("b",), 1),
    ]
    with pytest.raises(ValueError, match="'external' is a list of"):
        build({**apps["e"]["args"], "external": [{"models": ["a"]}]})
