"""The Ray Serve applications of a plan, for whoever deploys them: a RayService's `serveConfigV2`, `serve deploy`,
or `serve.run` in a program of your own. `modelhost ray serve` deploys the same applications itself.

    # serveConfigV2 (what `modelhost ray config` prints for a repository and deployment file):
    applications:
      - name: simple
        route_prefix: null
        import_path: modelhost.cluster.apps:build
        args: {deployment: simple, repositories: [s3://bucket/models], models: [simple]}
        deployments:
          - {name: models, autoscaling_config: {...}, ray_actor_options: {num_cpus: 0.25}}

    # Python:
    from ray import serve
    from modelhost.cluster.apps import build
    serve.run(build({"deployment": "simple", "repositories": ["/models"], "models": ["simple"]}),
              name="simple", route_prefix=None)

Applications deployed this way are served to clients by `modelhost ray serve --attach` (which deploys nothing and
routes to them). Their replicas open modelhost's link for the ingress only with a token: the
`MODELHOST_LINK_TOKEN` environment variable, the same in the replicas' containers and the ingress's (without it,
requests go through Ray's handles, which cost milliseconds each).
"""

from __future__ import annotations

import os
from typing import Any

from modelhost.cluster.plan import ClusterPlan, DeploymentSpec
from modelhost.cluster.replica import TOKEN_VARIABLE, ModelReplica, ReplicaSettings, multiplexed_replica
from modelhost.cluster.serve_state import NAMESPACE, STATISTICS_ACTOR

BUILDER = "modelhost.cluster.apps:build"


def settings_of(
    plan: ClusterPlan,
    spec: DeploymentSpec,
    overrides: dict[str, str],
    generation: int,
    token: str,
    external: tuple[DeploymentSpec, ...] = (),
) -> ReplicaSettings:
    """`external`: the other deployments its ensembles' steps go to (ClusterPlan.external_of)."""
    return ReplicaSettings(
        deployment=spec.name,
        repositories=plan.repositories,
        models=spec.models,
        server_options={**plan.server_options, **spec.server},
        overrides={m: c for m, c in overrides.items() if m in spec.models},
        statistics_actor=STATISTICS_ACTOR,
        namespace=NAMESPACE,
        generation=generation,
        link_token=token,
        # What routing to them needs, no more: their replicas' settings do not update this deployment.
        external=tuple(
            DeploymentSpec(s.name, s.models, max_models_per_replica=s.max_models_per_replica)
            for s in external
        ),
    )


def application(spec: DeploymentSpec, settings: ReplicaSettings) -> Any:
    """The Ray Serve application of one deployment (`serve.run(application(...), name=spec.name)`)."""
    from ray import serve

    cls = multiplexed_replica(spec.max_models_per_replica) if spec.multiplexed else ModelReplica
    deployment: Any = serve.deployment(cls)
    return deployment.options(**spec.deployment_options()).bind(settings)


def build(args: dict[str, Any]) -> Any:
    """Ray Serve's application builder (`import_path: modelhost.cluster.apps:build`): one deployment of
    modelhost replicas from `args` (deployment, repositories, models; optionally max_models_per_replica,
    server, overrides, and `external`: the deployments its ensembles' steps go to, each with its deployment,
    models and max_models_per_replica). Replicas, autoscaling and actor options come from the config's
    `deployments` entry (named `models`), as Ray Serve applies them over the defaults here."""
    unknown = sorted(set(args) - _ARGS)
    if unknown:
        raise ValueError(f"unknown modelhost application argument(s): {', '.join(unknown)}")
    for key in ("deployment", "repositories", "models"):
        if key not in args:
            raise ValueError(f"the modelhost application needs '{key}' in its args")
    spec = _spec(args)
    others = args.get("external") or []
    if not isinstance(others, list) or not all(
        isinstance(other, dict) and "deployment" in other and "models" in other for other in others
    ):
        raise ValueError("the modelhost application's 'external' is a list of {deployment, models} mappings")
    external = tuple(_spec(other) for other in others)
    plan = ClusterPlan(tuple(args["repositories"]), (spec,), dict(args.get("server") or {}))
    token = os.environ.get(TOKEN_VARIABLE, "")
    overrides = dict(args.get("overrides") or {})
    return application(spec, settings_of(plan, spec, overrides, 0, token, external))


def _spec(args: dict[str, Any]) -> DeploymentSpec:
    return DeploymentSpec(
        name=str(args["deployment"]),
        models=tuple(args["models"]),
        max_models_per_replica=int(args.get("max_models_per_replica", 0)),
    )


def _external_args(spec: DeploymentSpec) -> dict[str, Any]:
    found: dict[str, Any] = {"deployment": spec.name, "models": list(spec.models)}
    if spec.multiplexed:
        found["max_models_per_replica"] = spec.max_models_per_replica
    return found


_ARGS = {"deployment", "repositories", "models", "max_models_per_replica", "server", "overrides", "external"}


def serve_config(plan: ClusterPlan) -> dict[str, Any]:
    """The Serve config (`serveConfigV2` of a RayService, or `serve deploy`'s file) of the plan's deployments."""
    applications = []
    for spec in plan.deployments:
        args: dict[str, Any] = {
            "deployment": spec.name,
            "repositories": list(plan.repositories),
            "models": list(spec.models),
        }
        if spec.multiplexed:
            args["max_models_per_replica"] = spec.max_models_per_replica
        server = {**plan.server_options, **spec.server}
        if server:
            args["server"] = server
        external = plan.external_of(spec)
        if external:  # its ensembles' steps run in these deployments
            args["external"] = [_external_args(other) for other in external]
        options = spec.deployment_options()
        options.pop("name")
        applications.append(
            {
                "name": spec.name,
                "route_prefix": None,
                "import_path": BUILDER,
                "args": args,
                "deployments": [{"name": "models", **options}],
            }
        )
    # Ray Serve's own HTTP proxy stays off the ports modelhost's ingress serves.
    return {"http_options": {"port": 8100}, "applications": applications}
