"""The Helm chart (deploy/helm/modelhost): `helm lint` and `helm template` with a real helm over every values file in
the chart's ci/ directory, each rendered document validated strictly against the Kubernetes 1.30 schemas (CRDs
against their published schemas in deploy/schemas), the container's arguments parsed by modelhost's own parser,
and values.schema.json refusing what a typo would otherwise let through."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deploy.helm_chart import (
    CHART,
    NAMESPACE,
    RELEASE,
    VALUES_FILES,
    container,
    fetch_helm,
    helm,
    only,
    render,
)
from deploy.kube_schemas import validate_manifest
from modelhost.cli.serve_args import parse_serve_args

CASES = [None, *VALUES_FILES]
IDS = ["defaults", *(p.name.removesuffix("-values.yaml") for p in VALUES_FILES)]
FULLNAME = f"{RELEASE}-modelhost"


@pytest.fixture(scope="module")
def binary() -> str:
    return fetch_helm()


def _kinds(documents: list[dict[str, Any]]) -> set[str]:
    return {d["kind"] for d in documents}


def test_the_matrix_covers_every_deployment_the_issue_names() -> None:
    assert {p.name for p in VALUES_FILES} >= {
        f"{name}-values.yaml" for name in ("cpu", "gpu", "hpa", "keda", "s3", "pvc")
    }


@pytest.mark.parametrize("values", CASES, ids=IDS)
def test_lints_clean(binary: str, values: Path | None) -> None:
    done = helm(binary, "lint", "--strict", str(CHART), *(["-f", str(values)] if values else []))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("values", CASES, ids=IDS)
def test_every_rendered_document_is_valid_for_kubernetes_1_30(binary: str, values: Path | None) -> None:
    documents = render(binary, values)
    assert _kinds(documents) >= {"Deployment", "Service", "ServiceAccount", "PodDisruptionBudget"}
    for document in documents:
        validate_manifest(document)


@pytest.mark.parametrize("values", CASES, ids=IDS)
def test_the_container_arguments_parse_as_modelhost_serve_flags(binary: str, values: Path | None) -> None:
    documents = render(binary, values)
    server = container(documents)
    options = parse_serve_args(server["args"])
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    assert (options.http_port, options.grpc_port, options.metrics_port) == (
        ports["http"],
        ports["grpc"],
        ports["metrics"],
    )
    # Kubernetes kills the pod at the end of its grace period: the preStop sleep and the server's drain must fit.
    pod = only(documents, "Deployment")["spec"]["template"]["spec"]
    sleep = int(
        server.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", ["sleep", "0"])[1]
    )
    assert pod["terminationGracePeriodSeconds"] > sleep + options.exit_timeout_secs


def test_autoscaling_renders_the_hpa_with_its_adapter_rule_or_the_scaled_object(binary: str) -> None:
    by_name = {p.name.removesuffix("-values.yaml"): p for p in VALUES_FILES}
    hpa_documents = render(binary, by_name["hpa"])
    hpa = only(hpa_documents, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": FULLNAME}
    (metric,) = hpa["spec"]["metrics"]
    rules = only(hpa_documents, "ConfigMap")["data"]["config.yaml"]
    assert (
        f"as: {metric['pods']['metric']['name']}" in rules
    )  # the adapter serves the metric the HPA asks for
    assert "replicas" not in only(hpa_documents, "Deployment")["spec"]  # the autoscaler owns the count
    assert "ServiceMonitor" in _kinds(hpa_documents)

    keda_documents = render(binary, by_name["keda"])
    scaled = only(keda_documents, "ScaledObject")
    assert scaled["spec"]["scaleTargetRef"]["name"] == FULLNAME
    assert "HorizontalPodAutoscaler" not in _kinds(keda_documents)  # KEDA makes its own


def test_gpu_values_request_the_gpu_and_pick_the_gpu_image(binary: str) -> None:
    documents = render(binary, CHART / "ci" / "gpu-values.yaml")
    server = container(documents)
    assert server["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert server["resources"]["requests"]["nvidia.com/gpu"] == 1
    assert server["image"].endswith("-gpu")
    pod = only(documents, "Deployment")["spec"]["template"]["spec"]
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "4Gi"}} in pod["volumes"]


def test_repository_sources_reach_the_server(binary: str) -> None:
    s3 = render(binary, CHART / "ci" / "s3-values.yaml")
    assert parse_serve_args(container(s3)["args"]).model_repositories == ["s3://my-models/triton-repository"]
    assert container(s3)["envFrom"] == [{"secretRef": {"name": "modelhost-s3"}}]
    assert "eks.amazonaws.com/role-arn" in only(s3, "ServiceAccount")["metadata"]["annotations"]

    pvc = render(binary, CHART / "ci" / "pvc-values.yaml")
    (repository,) = parse_serve_args(container(pvc)["args"]).model_repositories
    mounts = {m["name"]: m for m in container(pvc)["volumeMounts"]}
    assert mounts["models"]["mountPath"] == repository
    volumes = {v["name"]: v for v in only(pvc, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"]["claimName"] == "model-repository"

    gcs = render(binary, CHART / "ci" / "gcs-values.yaml")
    env = {e["name"]: e.get("value") for e in container(gcs)["env"]}
    key_mount = {m["name"]: m for m in container(gcs)["volumeMounts"]}["gcs-key"]["mountPath"]
    assert env["GOOGLE_APPLICATION_CREDENTIALS"] == f"{key_mount}/key.json"
    assert parse_serve_args(container(gcs)["args"]).load_models == ["mlp", "simple"]


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("autoscaling.signl=queueComputeRatio", "Additional property signl is not allowed"),
        ("autoscaling.signal=queueTime", "autoscaling.signal"),
        ("replicas=3", "Additional property replicas is not allowed"),
        ("probes.type=exec", "probes.type"),
        ("serviceMonitor.interval=15", "serviceMonitor.interval"),
        ("modelRepository.source=s3", "modelRepository"),
        ("server.extraArgs={-v}", "server.extraArgs"),
        # A GCS Secret with nothing saying which key is the service-account file would be dropped.
        (
            "modelRepository.source=gcs,modelRepository.uri=gs://m/r,modelRepository.credentialsSecret=s",
            "modelRepository",
        ),
        # KEDA's Prometheus scaler ignores a TriggerAuthentication unless authModes names what it supplies.
        (
            "autoscaling.enabled=true,autoscaling.engine=keda,autoscaling.keda.authenticationRef=a",
            "autoscaling.keda",
        ),
        ("autoscaling.targets.queueComputeRatio=0", "autoscaling.targets.queueComputeRatio"),
    ],
)
def test_a_typo_in_values_fails_at_install(binary: str, setting: str, complaint: str) -> None:
    done = helm(binary, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--set", setting)
    assert done.returncode != 0
    assert complaint in done.stderr, done.stderr


def test_a_grace_period_shorter_than_the_drain_is_refused(binary: str) -> None:
    done = helm(binary, "template", RELEASE, str(CHART), "--set", "server.exitTimeoutSecs=60")
    assert done.returncode == 0, done.stderr  # computed: long enough
    done = helm(
        binary,
        "template",
        RELEASE,
        str(CHART),
        "--set",
        "server.exitTimeoutSecs=60,terminationGracePeriodSeconds=60",
    )
    assert done.returncode != 0
    assert "must be longer than preStopSleepSeconds + server.exitTimeoutSecs (65)" in done.stderr


def test_a_fractional_target_from_set_becomes_a_quantity(binary: str) -> None:
    """`--set` gives 0.25 as a string; the HPA gets the quantity 250m, and KEDA the threshold as written."""
    hpa = render(binary, None, "autoscaling.enabled=true", "autoscaling.targets.queueComputeRatio=0.25")
    (metric,) = only(hpa, "HorizontalPodAutoscaler")["spec"]["metrics"]
    assert metric["pods"]["target"]["averageValue"] == "250m"
    keda = render(
        binary,
        None,
        "autoscaling.enabled=true,autoscaling.engine=keda",
        "autoscaling.targets.queueComputeRatio=0.25",
    )
    (trigger,) = only(keda, "ScaledObject")["spec"]["triggers"]
    assert trigger["metadata"]["threshold"] == "0.25"
