"""Which models run in which Ray Serve deployment, with what replicas and resources: the deployment file, checked.

`modelhost ray serve --deployments FILE` reads a YAML (or JSON) file of this shape; every key is optional:

    defaults:                       # for every deployment
      autoscaling: {min_replicas: 1, max_replicas: 4, target_ongoing_requests: 8}
      actor: {num_cpus: 1, num_gpus: 0, memory: 2Gi}
      max_ongoing_requests: 64
      server: {backend_config: {python: {shm-default-byte-size: "4194304"}}}
    deployments:
      vision:                       # a group: these models share each replica
        models: [resnet50, yolo]
        num_replicas: 2             # fixed, instead of autoscaling
        actor: {num_gpus: 1}
      tail:                         # the long tail: any model not named elsewhere, at most 2 loaded per replica
        models: ["*"]
        max_models_per_replica: 2
        server: {model_memory_budget: 1Gi}   # this deployment's replicas' options, over defaults.server

A model the file names nowhere (and no `"*"` group takes) gets a deployment of its own, named after it, with the
defaults. Without a file every model is its own deployment. An ensemble's steps run where their models are
deployed: in the ensemble's own deployment if the file groups them with it, else in theirs (the ensemble's
replicas send them there, `external_of`). `server` holds modelhost.Server options (the names of
`modelhost serve`'s flags with underscores) given to every replica's engine; a deployment's own `server` adds to
them and overrides them for its replicas. The file's errors name the key at fault, before anything is deployed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelhost.engine.registry.catalog import steps_in_files
from modelhost.repository.layout import model_directories
from modelhost.repository.sources import RepositoryError, open_repository

# The defaults of a deployment nobody configured: one replica that may grow to two, on a fraction of a CPU, so
# that several fit on a small machine (a model's own threads are not bounded by Ray's CPU accounting anyway).
DEFAULT_AUTOSCALING: dict[str, Any] = {"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 16}
DEFAULT_ACTOR: dict[str, Any] = {"num_cpus": 0.25, "memory": "measured"}
# actor `memory: measured`: the replica's memory reservation is sized from what its models took when loaded once
# before deploying (cluster.sizing); `memory: null` reserves none.
MEASURED = "measured"
# Requests one replica takes at once before Ray queues them at the caller: enough to fill dynamic batches (Ray's
# own default of 5 starves a batching model and, past it, Ray backs off in steps of seconds).
DEFAULT_MAX_ONGOING = 256
ALL_OTHERS = "*"
HEALTH_CHECK_PERIOD_S = 2.0

_AUTOSCALING_KEYS = {
    "min_replicas",
    "max_replicas",
    "initial_replicas",
    "target_ongoing_requests",
    "upscale_delay_s",
    "downscale_delay_s",
    "metrics_interval_s",
    "look_back_period_s",
    "upscaling_factor",
    "downscaling_factor",
    "target_queue_time_ms",  # modelhost's: scale on the engines' queue time (cluster.autoscaling)
}
_ACTOR_KEYS = {"num_cpus", "num_gpus", "memory", "resources"}
_GROUP_KEYS = {
    "models",
    "autoscaling",
    "num_replicas",
    "actor",
    "max_ongoing_requests",
    "max_models_per_replica",
    "server",
}
_DEFAULT_KEYS = {"autoscaling", "num_replicas", "actor", "max_ongoing_requests", "server"}


class PlanError(ValueError):
    """The deployment file, or the repository it is read against, is wrong: the message says where."""


@dataclass(frozen=True)
class DeploymentSpec:
    """One Ray Serve application (of one deployment) and the models its replicas serve."""

    name: str
    models: tuple[str, ...]
    # > 0: a multiplexed pool, loading the models on demand, at most this many per replica, least recently used
    # out; its `models` are the ones it may load.
    max_models_per_replica: int = 0
    # Either a fixed replica count or Ray Serve's autoscaling_config.
    num_replicas: int | None = None
    autoscaling: dict[str, Any] = field(default_factory=dict)
    actor: dict[str, Any] = field(default_factory=dict)
    max_ongoing_requests: int = DEFAULT_MAX_ONGOING
    # modelhost.Server options of this deployment's replicas, over the plan's (ClusterPlan.server_options).
    server: dict[str, Any] = field(default_factory=dict)

    @property
    def multiplexed(self) -> bool:
        return self.max_models_per_replica > 0

    def deployment_options(self) -> dict[str, Any]:
        """The keyword arguments of `serve.deployment(...).options(...)` for this deployment (a memory still to
        be measured reserves none)."""
        actor = {k: v for k, v in self.actor.items() if not (k == "memory" and v == MEASURED)}
        options: dict[str, Any] = {
            "name": "models",  # one deployment per application: the application carries the name
            "ray_actor_options": actor,
            "max_ongoing_requests": self.max_ongoing_requests,
            # Ray's health check starts a replica's reports (its link address) where nothing else calls it
            # soon: a fixed replica count, which Ray asks no autoscaling metrics of.
            "health_check_period_s": HEALTH_CHECK_PERIOD_S,
        }
        if self.num_replicas is not None:
            options["num_replicas"] = self.num_replicas
        else:
            # Ray's policy on the requests the replicas' engines hold (cluster.autoscaling): the ingress's
            # inference reaches them over modelhost's link, which Ray's own count does not see.
            autoscaling = dict(self.autoscaling)
            kwargs = {}
            if "target_queue_time_ms" in autoscaling:  # modelhost's key: for the policy, not Ray's config
                kwargs["target_queue_time_ms"] = autoscaling.pop("target_queue_time_ms")
            options["autoscaling_config"] = {
                **autoscaling,
                "policy": {
                    "policy_function": "modelhost.cluster.autoscaling:Policy",
                    "policy_kwargs": kwargs,
                },
            }
        return options


# The deployment serving a model now (None: none does).
Locate = Callable[[str], DeploymentSpec | None]


@dataclass(frozen=True)
class ClusterPlan:
    repositories: tuple[str, ...]
    deployments: tuple[DeploymentSpec, ...]
    # modelhost.Server options of every replica's engine.
    server_options: dict[str, Any] = field(default_factory=dict)
    # Every model of the repositories, by name (what may be loaded later even if not deployed now).
    repository_models: tuple[str, ...] = ()
    # What a deployment the file does not configure gets.
    defaults: DeploymentSpec = field(
        default_factory=lambda: DeploymentSpec(
            name="", models=(), autoscaling=dict(DEFAULT_AUTOSCALING), actor=dict(DEFAULT_ACTOR)
        )
    )
    # The models each ensemble of the repositories names in its steps (from its config file).
    steps: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def deployment_of(self, model: str) -> DeploymentSpec | None:
        for spec in self.deployments:
            if model in spec.models:
                return spec
        return None

    def external_of(self, spec: DeploymentSpec, locate: Locate | None = None) -> tuple[DeploymentSpec, ...]:
        """The other deployments serving models that the ensembles of `spec` name in their steps (through
        ensembles of `spec` itself, too): its replicas send those steps there instead of loading the models.
        `locate`: the deployment serving a model now (default: the plan's); a model no deployment serves loads
        with the ensemble, as on one server."""
        where = locate or self.deployment_of
        found: dict[str, DeploymentSpec] = {}
        seen: set[str] = set()
        todo = [m for m in spec.models if m in self.steps]
        while todo:
            model = todo.pop()
            if model in seen:
                continue
            seen.add(model)
            for step in self.steps.get(model, ()):
                other = where(step)
                if other is None or other.name == spec.name:
                    todo.append(step)  # loaded here: its own steps may live elsewhere
                else:
                    found[other.name] = other
        return tuple(found[name] for name in sorted(found))

    def single(self, model: str) -> DeploymentSpec:
        """A deployment of its own for `model`, with the defaults (a model loaded later, outside the file)."""
        return dataclasses.replace(self.defaults, name=model, models=(model,))


def repository_models(repositories: list[str]) -> list[str]:
    """The model names of the repositories (remote ones mirrored first), as the server would find them."""
    return sorted(_scan(repositories))


def _scan(repositories: list[str]) -> dict[str, Path]:
    """Each model's directory (remote repositories mirrored first)."""
    found: dict[str, tuple[str, Path]] = {}
    for url in repositories:
        try:
            root = open_repository(url).sync()
        except RepositoryError as e:
            raise PlanError(str(e)) from None
        for name, directory in model_directories(root).items():
            if name in found:
                raise PlanError(f"model '{name}' is in two repositories: {found[name][0]} and {url}")
            found[name] = (url, directory)
    return {name: path for name, (_, path) in found.items()}


def read_plan(repositories: list[str], path: str | Path | None) -> ClusterPlan:
    """The plan for these repositories, from the deployment file at `path` (None: every model on its own)."""
    document: Any = {}
    if path is not None:
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise PlanError(f"cannot read the deployment file {path}: {e.strerror}") from None
        document = _parse(text, str(path))
    directories = _scan(repositories)
    return plan_from(repositories, document, sorted(directories), ensemble_steps(directories))


def ensemble_steps(directories: dict[str, Path]) -> dict[str, tuple[str, ...]]:
    """The models each ensemble among these model directories names in its steps (read from its config file)."""
    return {
        name: tuple(dict.fromkeys(found))  # each model once, however many steps name it
        for name, d in directories.items()
        if (found := steps_in_files([d], name, None))
    }


def _parse(text: str, where: str) -> Any:
    if where.endswith(".json"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise PlanError(f"{where}: not JSON: {e}") from None
    import yaml  # PyYAML: a dependency of the `ray` extra

    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise PlanError(f"{where}: not YAML: {e}") from None


def plan_from(
    repositories: list[str],
    document: Any,
    models: list[str],
    steps: dict[str, tuple[str, ...]] | None = None,
) -> ClusterPlan:
    """The plan a parsed deployment file gives for a repository holding `models` (`steps`: the models its
    ensembles name, ensemble_steps)."""
    if not isinstance(document, dict):
        raise PlanError("the deployment file must be a mapping with 'defaults' and 'deployments'")
    _only(document, {"defaults", "deployments"}, "the deployment file")
    raw_defaults = document.get("defaults") or {}
    if not isinstance(raw_defaults, dict):
        raise PlanError("'defaults' must be a mapping")
    _only(raw_defaults, _DEFAULT_KEYS, "'defaults'")
    server = raw_defaults.get("server") or {}
    if not isinstance(server, dict):
        raise PlanError("'defaults.server' must be a mapping of modelhost.Server options")
    _check_server_options(server, "'defaults.server'")
    defaults = _spec(
        "",
        (),
        {k: v for k, v in raw_defaults.items() if k != "server"},
        "'defaults'",
        DeploymentSpec(name="", models=(), autoscaling=dict(DEFAULT_AUTOSCALING), actor=dict(DEFAULT_ACTOR)),
    )
    groups = document.get("deployments") or {}
    if not isinstance(groups, dict):
        raise PlanError("'deployments' must be a mapping of deployment names to their settings")
    known = set(models)
    taken: dict[str, str] = {}
    specs: list[DeploymentSpec] = []
    catch_all: tuple[str, dict[str, Any]] | None = None
    for name, raw in groups.items():
        where = f"deployment '{name}'"
        if not isinstance(raw, dict):
            raise PlanError(f"{where} must be a mapping with 'models'")
        _only(raw, _GROUP_KEYS, where)
        names = raw.get("models")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise PlanError(f"{where}: 'models' must be a non-empty list of model names")
        if ALL_OTHERS in names:
            if names != [ALL_OTHERS]:
                raise PlanError(f"{where}: '*' stands for every other model and must be alone in 'models'")
            if catch_all is not None:
                raise PlanError(
                    f"{where}: only one deployment may take '*' (deployment '{catch_all[0]}' does)"
                )
            catch_all = (str(name), raw)
            continue
        for model in names:
            if model not in known:
                raise PlanError(f"{where} names model '{model}', which is not in the model repositories")
            if model in taken:
                raise PlanError(f"model '{model}' is in two deployments: '{taken[model]}' and '{name}'")
            taken[model] = str(name)
        specs.append(_spec(str(name), tuple(names), raw, where, defaults))
    others = tuple(m for m in models if m not in taken)
    if catch_all is not None:
        if others:
            specs.append(_spec(catch_all[0], others, catch_all[1], f"deployment '{catch_all[0]}'", defaults))
    else:
        group_names = {s.name for s in specs}
        for model in others:
            if model in group_names:
                raise PlanError(
                    f"model '{model}' would get a deployment of its own named '{model}', which a group has"
                )
            specs.append(_spec(model, (model,), {}, f"model '{model}'", defaults))
    return ClusterPlan(
        tuple(repositories), tuple(specs), dict(server), tuple(models), defaults, dict(steps or {})
    )


# Server options the cluster sets itself: each replica serves the models of its deployment, without frontends.
_CLUSTER_SET = {
    "model_repositories",
    "model_control_mode",
    "load_models",
    "allow_http",
    "allow_grpc",
    "allow_metrics",
    "allow_sagemaker",
    "allow_vertex_ai",
    "frontend_processes",
}


def _check_server_options(server: dict[str, Any], where: str) -> None:
    from modelhost.options import ServerOptions

    fields = {f.name for f in dataclasses.fields(ServerOptions)}
    for key in server:
        if key in _CLUSTER_SET:
            raise PlanError(f"{where}: '{key}' is set by the cluster itself")
        if key not in fields:
            raise PlanError(f"{where}: unknown server option '{key}'")
    # Their values too, as the replicas' engines will take them (explicit mode): here, before anything is
    # deployed, rather than as a replica that fails to start.
    for key, value in server.items():
        try:
            ServerOptions(model_control_mode="explicit", **{key: value})
        except (TypeError, ValueError) as e:
            problem = str(e) if isinstance(e, ValueError) else f"{value!r} is not a value it takes"
            raise PlanError(f"{where}: server option '{key}': {problem}") from None


def _only(mapping: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(mapping) - allowed)
    if unknown:
        raise PlanError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(allowed))})")


def _spec(
    name: str, models: tuple[str, ...], raw: dict[str, Any], where: str, base: DeploymentSpec
) -> DeploymentSpec:
    if "num_replicas" in raw and "autoscaling" in raw:
        raise PlanError(f"{where}: give 'num_replicas' or 'autoscaling', not both")
    num_replicas = base.num_replicas
    autoscaling = dict(base.autoscaling)
    if "num_replicas" in raw:
        num_replicas = _positive_int(raw["num_replicas"], f"{where}: 'num_replicas'")
    if "autoscaling" in raw:
        num_replicas = None
        given = raw["autoscaling"]
        if not isinstance(given, dict):
            raise PlanError(f"{where}: 'autoscaling' must be a mapping")
        _only(given, _AUTOSCALING_KEYS, f"{where}: 'autoscaling'")
        autoscaling = {**autoscaling, **given}
        _check_autoscaling(autoscaling, where)
    actor = dict(base.actor)
    if "actor" in raw:
        given = raw["actor"]
        if not isinstance(given, dict):
            raise PlanError(f"{where}: 'actor' must be a mapping")
        _only(given, _ACTOR_KEYS, f"{where}: 'actor'")
        actor.update(given)
    actor = _checked_actor(actor, where)
    max_ongoing = base.max_ongoing_requests
    if "max_ongoing_requests" in raw:
        max_ongoing = _positive_int(raw["max_ongoing_requests"], f"{where}: 'max_ongoing_requests'")
    per_replica = 0
    if "max_models_per_replica" in raw:
        per_replica = _positive_int(raw["max_models_per_replica"], f"{where}: 'max_models_per_replica'")
    server = raw.get("server") or {}
    if not isinstance(server, dict):
        raise PlanError(f"{where}: 'server' must be a mapping of modelhost.Server options")
    _check_server_options(server, f"{where}: 'server'")
    return DeploymentSpec(
        name=name,
        models=models,
        max_models_per_replica=per_replica,
        num_replicas=num_replicas,
        autoscaling=autoscaling,
        actor=actor,
        max_ongoing_requests=max_ongoing,
        server=dict(server),
    )


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"{where} must be a positive integer, not {value!r}")
    return value


def _check_autoscaling(config: dict[str, Any], where: str) -> None:
    for key, value in config.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise PlanError(f"{where}: autoscaling '{key}' must be a number >= 0, not {value!r}")
    low, high = config.get("min_replicas", 1), config.get("max_replicas", 1)
    if high < 1:
        raise PlanError(f"{where}: autoscaling 'max_replicas' must be at least 1")
    if low > high:
        raise PlanError(f"{where}: autoscaling 'min_replicas' ({low}) is above 'max_replicas' ({high})")


def _checked_actor(actor: dict[str, Any], where: str) -> dict[str, Any]:
    checked = dict(actor)
    for key in ("num_cpus", "num_gpus"):
        value = checked.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
            raise PlanError(f"{where}: actor '{key}' must be a number >= 0, not {value!r}")
    if checked.get("memory") is None:
        checked.pop("memory", None)
    elif checked["memory"] != MEASURED:
        checked["memory"] = _bytes(checked["memory"], f"{where}: actor 'memory'")
    resources = checked.get("resources")
    if resources is not None and (
        not isinstance(resources, dict) or not all(isinstance(v, int | float) for v in resources.values())
    ):
        raise PlanError(f"{where}: actor 'resources' must map resource names to numbers")
    return checked


def _bytes(value: Any, where: str) -> int:
    """A memory size: bytes, or a size as --model-memory-budget takes one (512Mi, 2G, 4GiB)."""
    from modelhost.engine.registry.model_memory import parse_size

    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    problem = "a percentage of RAM means nothing to Ray" if str(value).strip().endswith("%") else ""
    if isinstance(value, str) and not problem:
        try:
            return parse_size(value.strip())
        except ValueError as e:
            problem = str(e)
    raise PlanError(
        f"{where} must be bytes or a size such as 512Mi or 2G, not {value!r} ({problem or 'a number'})"
    )
