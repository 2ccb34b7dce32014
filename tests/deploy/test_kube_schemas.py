"""The manifest validator every deployment test relies on: it must accept valid objects and name what is wrong."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest

from deploy.kube_schemas import load_documents, validate_manifest

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: modelhost
  labels: {app.kubernetes.io/name: modelhost}
spec:
  replicas: 2
  selector:
    matchLabels: {app.kubernetes.io/name: modelhost}
  template:
    metadata:
      labels: {app.kubernetes.io/name: modelhost}
    spec:
      terminationGracePeriodSeconds: 45
      containers:
        - name: modelhost
          image: ghcr.io/modelhost/modelhost:0.1.0
          args: [--model-repository=/models, --exit-timeout-secs=30]
          ports:
            - {name: http, containerPort: 8000}
          readinessProbe:
            httpGet: {path: /v2/health/ready, port: http}
          resources:
            requests: {cpu: "1", memory: 2Gi}
"""

HPA = """
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: modelhost}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: modelhost}
  minReplicas: 1
  maxReplicas: 4
  metrics:
    - type: Pods
      pods:
        metric: {name: modelhost_queue_time_per_request_us}
        target: {type: AverageValue, averageValue: "50000"}
"""

SCALED_OBJECT = """
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: modelhost}
spec:
  scaleTargetRef: {name: modelhost}
  minReplicaCount: 1
  maxReplicaCount: 4
  triggers:
    - type: prometheus
      metadata:
        serverAddress: http://prometheus.monitoring:9090
        query: sum(rate(nv_inference_queue_duration_us[1m]))
        threshold: "50000"
"""

SERVICE_MONITOR = """
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: modelhost}
spec:
  selector:
    matchLabels: {app.kubernetes.io/name: modelhost}
  endpoints:
    - port: metrics
      path: /metrics
      interval: 15s
"""


def _doc(text: str) -> dict[str, Any]:
    (doc,) = load_documents(text)
    return doc


def _rejects(doc: dict[str, Any], *fragments: str) -> str:
    with pytest.raises(AssertionError) as caught:
        validate_manifest(doc)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


@pytest.mark.parametrize("text", [DEPLOYMENT, HPA, SCALED_OBJECT, SERVICE_MONITOR])
def test_accepts_valid_objects(text: str) -> None:
    validate_manifest(_doc(text))


def test_load_documents_drops_empty_ones() -> None:
    docs = load_documents(f"---\n# only a comment\n---\n{DEPLOYMENT}\n---\n{HPA}\n---\n")
    assert [doc["kind"] for doc in docs] == ["Deployment", "HorizontalPodAutoscaler"]


def test_unknown_field_in_a_builtin_kind_fails_and_each_problem_is_named() -> None:
    doc = _doc(DEPLOYMENT)
    doc["spec"]["replica"] = doc["spec"].pop("replicas")
    doc["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8000"
    _rejects(doc, "Deployment/modelhost", "'replica' was unexpected", "containerPort: '8000' is not of type")


def test_strict_is_what_rejects_unknown_fields() -> None:
    """kubernetes-validate without strict accepts the typo: validate_manifest's verdict comes from strict=True."""
    doc = _doc(DEPLOYMENT)
    doc["spec"]["replica"] = 3
    kubernetes_validate.validate(doc, "1.30.0", strict=False)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, "1.30.0", strict=True)
    _rejects(doc, "'replica' was unexpected")


def test_removed_api_version_has_no_schema_and_fails() -> None:
    doc = _doc(HPA)
    doc["apiVersion"] = "autoscaling/v2beta2"  # removed in Kubernetes 1.26, still in Triton's chart
    _rejects(doc, "autoscaling/v2beta2 HorizontalPodAutoscaler/modelhost", "no schema")


def test_missing_required_fields_fail() -> None:
    deployment = _doc(DEPLOYMENT)
    del deployment["spec"]["selector"]
    _rejects(deployment, "'selector' is a required property")
    scaled = _doc(SCALED_OBJECT)
    del scaled["spec"]["scaleTargetRef"]
    del scaled["metadata"]["name"]
    _rejects(
        scaled, "ScaledObject/<no name>", "'scaleTargetRef' is a required property", "'name' is a required"
    )


def test_unknown_fields_in_custom_resources_fail() -> None:
    scaled = _doc(SCALED_OBJECT)
    scaled["spec"]["triggers"][0]["metricTyp"] = "AverageValue"
    _rejects(scaled, "ScaledObject/modelhost", "spec.triggers.0", "'metricTyp' was unexpected")
    monitor = _doc(SERVICE_MONITOR)
    monitor["metadata"]["label"] = {"release": "prometheus"}  # metadata is checked as an ObjectMeta
    _rejects(monitor, "ServiceMonitor/modelhost", "'label' was unexpected")


def test_int_or_string_fields_take_either_and_nothing_else() -> None:
    monitor = _doc(SERVICE_MONITOR)
    endpoint = monitor["spec"]["endpoints"][0]
    del endpoint["port"]
    for target in (8002, "metrics"):
        endpoint["targetPort"] = target
        validate_manifest(copy.deepcopy(monitor))
    endpoint["targetPort"] = True
    _rejects(monitor, "spec.endpoints.0.targetPort")


def test_unknown_custom_kinds_and_unserved_versions_fail() -> None:
    scaled = _doc(SCALED_OBJECT)
    scaled["apiVersion"] = "keda.sh/v1beta1"
    _rejects(scaled, "no schema")
    _rejects({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}, "no schema")
