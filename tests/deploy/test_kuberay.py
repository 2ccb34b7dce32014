"""The KubeRay example (deploy/kuberay/): valid against the Kubernetes schemas and KubeRay's RayService CRD, its
serveConfigV2 what `modelhost ray config` gives for its repository and deployments file (and what Ray Serve
accepts), and its ingress wired to the head's Ray and to the replicas' link token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.kube_schemas import load_documents, validate_manifest
from modelhost.cli.ray import serve_parser
from modelhost.cluster.apps import serve_config
from modelhost.cluster.plan import ensemble_steps, plan_from

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "kuberay" / "modelhost-rayservice.yaml"
EXAMPLES = ROOT / "src" / "modelhost" / "examples"


def _documents() -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in load_documents(MANIFEST.read_text())}


def _containers(rayservice: dict[str, Any]) -> dict[str, dict[str, Any]]:
    cluster = rayservice["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster["workerGroupSpecs"]]
    return {c["name"]: c for pod in pods for c in pod["spec"]["containers"]}


def _ingress_args(rayservice: dict[str, Any]) -> Any:
    command = _containers(rayservice)["ingress"]["command"]
    assert command[:3] == ["modelhost", "ray", "serve"]
    return serve_parser().parse_args(command[3:])


def test_every_document_is_valid() -> None:
    documents = _documents()
    assert set(documents) == {"ConfigMap", "RayService", "Service"}
    for document in documents.values():
        validate_manifest(document)


def test_the_serve_config_is_modelhost_ray_configs_and_ray_serve_accepts_it() -> None:
    pytest.importorskip("ray")
    documents = _documents()
    args = _ingress_args(documents["RayService"])
    deployments = yaml.safe_load(documents["ConfigMap"]["data"]["deployments.yaml"])
    directories = {p.name: p for p in EXAMPLES.iterdir() if p.is_dir() and not p.name.startswith(".")}
    plan = plan_from(args.model_repository, deployments, sorted(directories), ensemble_steps(directories))
    assert plan.steps == {"simple_ensemble": ("simple",)}  # its steps run in the 'onnx' deployment
    given = yaml.safe_load(documents["RayService"]["spec"]["serveConfigV2"])
    assert given == serve_config(plan)
    import warnings

    with warnings.catch_warnings():  # Ray's own pydantic models use a form pydantic 2 deprecates
        warnings.simplefilter("ignore", DeprecationWarning)
        from ray.serve.schema import ServeDeploySchema

    assert len(ServeDeploySchema.model_validate(given).applications) == len(plan.deployments)


def test_the_ingress_attaches_to_the_heads_ray_with_the_replicas_token() -> None:
    documents = _documents()
    rayservice = documents["RayService"]
    args = _ingress_args(rayservice)
    assert args.attach and args.address == "127.0.0.1:6379"
    head = rayservice["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]
    mounts = {m["name"]: m["mountPath"] for m in _containers(rayservice)["ingress"]["volumeMounts"]}
    assert Path(args.deployments).parent == Path(mounts["deployments"])
    config_map = next(v for v in head["spec"]["volumes"] if v["name"] == "deployments")["configMap"]["name"]
    assert config_map == documents["ConfigMap"]["metadata"]["name"]
    # A driver finds the head's raylet through Ray's session directory: shared with the ray-head container.
    head_mounts = {m["name"]: m["mountPath"] for m in _containers(rayservice)["ray-head"]["volumeMounts"]}
    assert mounts["ray-session"] == head_mounts["ray-session"] == "/tmp/ray"
    tokens = {
        name: next(e["valueFrom"]["secretKeyRef"] for e in c["env"] if e["name"] == "MODELHOST_LINK_TOKEN")
        for name, c in _containers(rayservice).items()
    }
    assert (
        set(tokens) == {"ray-head", "ingress", "ray-worker"} and len({str(t) for t in tokens.values()}) == 1
    )


def test_the_service_reaches_the_ingress_ports() -> None:
    documents = _documents()
    rayservice, service = documents["RayService"], documents["Service"]
    labels = rayservice["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["metadata"]["labels"]
    selector = service["spec"]["selector"]
    assert {k: v for k, v in selector.items() if k != "ray.io/node-type"}.items() <= labels.items()
    assert selector["ray.io/node-type"] == "head"  # KubeRay's label on the head pod
    ports = {p["name"]: p["containerPort"] for p in _containers(rayservice)["ingress"]["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= set(ports)
    args = _ingress_args(rayservice)
    assert (ports["http"], ports["grpc"], ports["metrics"]) == (
        args.http_port,
        args.grpc_port,
        args.metrics_port,
    )
