"""The ECS and SageMaker deployment files are valid AWS API requests, agree with each other, and run modelhost.

Offline: every JSON file under deploy/ecs and deploy/sagemaker, and every ```json block of docs/deploy/ecs.md and
docs/deploy/sagemaker.md marked `<!-- aws: <service> <Operation> -->` (or `<!-- aws: <service> shape <Shape> -->`),
is validated with botocore's own parameter validation against the service model botocore ships, plus the
enumerations the model lists (ParamValidator leaves those to the server). A block marked `<!-- aws: not-a-request
... -->` is left alone; an unmarked block fails. The CloudWatch agent configuration is validated against the
agent's own JSON schema (translator/config/schema.json of aws/amazon-cloudwatch-agent, commit ab55b8d, kept in
deploy/ecs/cloudwatch-agent/), and the scaling policies must ask for what it publishes.

The task definition's command is then run: modelhost serving the repository from a local S3 (moto) at the bucket
and prefix of the file, the health check command run against it, the policy's metric math evaluated on two
scrapes under load and two idle, and SIGTERM answered with a clean exit, the server's own exit timeout within
stopTimeout.
"""

from __future__ import annotations

import ast
import copy
import functools
import json
import math
import operator
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import botocore.model
import botocore.session
import botocore.validate
import jsonschema
import pytest
import yaml

from deploy.promql_eval import parse_scrape
from deploy.slow_load import add_sleeping_slow, closed_loop_load
from e2e.server_process import free_ports
from modelhost.cli.sagemaker import MULTI_MODEL_DIR, sagemaker_launch
from modelhost.cli.serve_args import parse_serve_args
from s3_server import aws_test_env, moto_server, s3_client, upload_directory

ROOT = Path(__file__).resolve().parents[2]
ECS = ROOT / "deploy" / "ecs"
AGENT = ECS / "cloudwatch-agent"
SAGEMAKER = ROOT / "deploy" / "sagemaker"
DOCS = (ROOT / "docs" / "deploy" / "ecs.md", ROOT / "docs" / "deploy" / "sagemaker.md")

# Every JSON file of deploy/ecs and deploy/sagemaker: the API operation it is the input of.
REQUESTS: dict[str, tuple[str, str]] = {
    "deploy/ecs/cluster.json": ("ecs", "CreateCluster"),
    "deploy/ecs/task-definition.json": ("ecs", "RegisterTaskDefinition"),
    "deploy/ecs/task-definition-gpu.json": ("ecs", "RegisterTaskDefinition"),
    "deploy/ecs/target-group.json": ("elbv2", "CreateTargetGroup"),
    "deploy/ecs/target-group-attributes.json": ("elbv2", "ModifyTargetGroupAttributes"),
    "deploy/ecs/service.json": ("ecs", "CreateService"),
    "deploy/ecs/service-gpu.json": ("ecs", "CreateService"),
    "deploy/ecs/capacity-provider-gpu.json": ("ecs", "CreateCapacityProvider"),
    "deploy/ecs/cluster-capacity-providers.json": ("ecs", "PutClusterCapacityProviders"),
    "deploy/ecs/scalable-target.json": ("application-autoscaling", "RegisterScalableTarget"),
    "deploy/ecs/scalable-target-gpu.json": ("application-autoscaling", "RegisterScalableTarget"),
    "deploy/ecs/scaling-policy.json": ("application-autoscaling", "PutScalingPolicy"),
    "deploy/ecs/scaling-policy-gpu.json": ("application-autoscaling", "PutScalingPolicy"),
    "deploy/ecs/cloudwatch-agent/task-definition.json": ("ecs", "RegisterTaskDefinition"),
    "deploy/ecs/cloudwatch-agent/service.json": ("ecs", "CreateService"),
    "deploy/sagemaker/model.json": ("sagemaker", "CreateModel"),
    "deploy/sagemaker/endpoint-config.json": ("sagemaker", "CreateEndpointConfig"),
    "deploy/sagemaker/endpoint.json": ("sagemaker", "CreateEndpoint"),
    "deploy/sagemaker/model-multi-model.json": ("sagemaker", "CreateModel"),
    "deploy/sagemaker/endpoint-config-multi-model.json": ("sagemaker", "CreateEndpointConfig"),
    "deploy/sagemaker/endpoint-multi-model.json": ("sagemaker", "CreateEndpoint"),
    "deploy/sagemaker/scalable-target.json": ("application-autoscaling", "RegisterScalableTarget"),
    "deploy/sagemaker/scalable-target-multi-model.json": (
        "application-autoscaling",
        "RegisterScalableTarget",
    ),
    "deploy/sagemaker/scaling-policy.json": ("application-autoscaling", "PutScalingPolicy"),
    "deploy/sagemaker/scaling-policy-multi-model.json": ("application-autoscaling", "PutScalingPolicy"),
    "deploy/sagemaker/scaling-policy-concurrency.json": ("application-autoscaling", "PutScalingPolicy"),
}
NOT_REQUESTS = {
    "deploy/ecs/cloudwatch-agent/config.json",  # the agent's own configuration (CW_CONFIG_CONTENT)
    "deploy/ecs/cloudwatch-agent/amazon-cloudwatch-agent.schema.json",  # the schema it is checked against
}
# (ECS service file, its task definition, scalable target, scaling policy)
ECS_DEPLOYMENTS = [
    ("service.json", "task-definition.json", "scalable-target.json", "scaling-policy.json"),
    ("service-gpu.json", "task-definition-gpu.json", "scalable-target-gpu.json", "scaling-policy-gpu.json"),
]
# (model, endpoint config, endpoint, scalable target, scaling policies)
SAGEMAKER_DEPLOYMENTS = [
    (
        "model.json",
        "endpoint-config.json",
        "endpoint.json",
        "scalable-target.json",
        ["scaling-policy.json", "scaling-policy-concurrency.json"],
    ),
    (
        "model-multi-model.json",
        "endpoint-config-multi-model.json",
        "endpoint-multi-model.json",
        "scalable-target-multi-model.json",
        ["scaling-policy-multi-model.json"],
    ),
]
CONTAINER = "modelhost"  # the container name in the task definitions
SSM_STANDARD_LIMIT = 4096  # characters in a Standard-tier SSM parameter value


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _ecs(name: str) -> Any:
    return _load(ECS / name)


def _sagemaker(name: str) -> Any:
    return _load(SAGEMAKER / name)


# Validation ----------------------------------------------------------------------------------------------------


@functools.cache
def _service_model(service: str) -> botocore.model.ServiceModel:
    return botocore.session.get_session().get_service_model(service)


def _input_shape(service: str, operation: str) -> botocore.model.Shape:
    shape = _service_model(service).operation_model(operation).input_shape
    assert shape is not None, f"{service} {operation} takes no input"
    return shape


def _enum_errors(value: Any, shape: botocore.model.Shape, path: str) -> list[str]:
    """Values of enumerated strings that the service model does not list (botocore leaves enums unchecked)."""
    if isinstance(shape, botocore.model.StructureShape) and isinstance(value, dict):
        return [
            error
            for key, item in value.items()
            if key in shape.members
            for error in _enum_errors(item, shape.members[key], f"{path}.{key}")
        ]
    if isinstance(shape, botocore.model.ListShape) and isinstance(value, list):
        return [e for i, item in enumerate(value) for e in _enum_errors(item, shape.member, f"{path}[{i}]")]
    if isinstance(shape, botocore.model.MapShape) and isinstance(value, dict):
        return [e for key, item in value.items() for e in _enum_errors(item, shape.value, f"{path}.{key}")]
    enum = getattr(shape, "enum", None)
    if enum and isinstance(value, str) and value not in enum:
        return [f"{path}: {value!r} is none of {shape.name}'s values"]
    return []


def _problems(params: Any, shape: botocore.model.Shape) -> list[str]:
    report = botocore.validate.ParamValidator().validate(params, shape)
    problems = [report.generate_report()] if report.has_errors() else []
    return problems + _enum_errors(params, shape, shape.name)


def _json_files() -> set[str]:
    files = [*ECS.rglob("*.json"), *SAGEMAKER.rglob("*.json")]
    return {p.relative_to(ROOT).as_posix() for p in files}


def test_every_json_file_is_a_named_request_or_named_as_none() -> None:
    assert _json_files() == set(REQUESTS) | NOT_REQUESTS


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_file_is_a_valid_request(name: str) -> None:
    service, operation = REQUESTS[name]
    assert _problems(_load(ROOT / name), _input_shape(service, operation)) == []


@dataclass(frozen=True)
class Block:
    doc: str
    line: int
    marker: str
    text: str


MARKER = re.compile(r"<!--\s*aws:\s*(.*?)\s*-->")


def _json_blocks(path: Path) -> Iterator[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines):
        if line.strip() != "```json":
            continue
        end = lines.index("```", number + 1)
        previous = lines[number - 1] if number else ""
        marker = MARKER.fullmatch(previous.strip())
        yield Block(
            path.name, number + 1, marker.group(1) if marker else "", "\n".join(lines[number + 1 : end])
        )


DOC_BLOCKS = [block for doc in DOCS for block in _json_blocks(doc)]


def test_docs_have_request_blocks() -> None:
    # The parametrized test below would pass on no blocks at all.
    assert any(not block.marker.startswith("not-a-request") for block in DOC_BLOCKS)


@pytest.mark.parametrize("block", DOC_BLOCKS, ids=lambda b: f"{b.doc}:{b.line}")
def test_doc_json_block_is_marked_and_valid(block: Block) -> None:
    assert block.marker, (
        f"{block.doc}:{block.line}: a ```json block needs an <!-- aws: ... --> line before it"
    )
    params = json.loads(block.text)
    if block.marker.startswith("not-a-request"):
        return
    words = block.marker.split()
    if len(words) == 3 and words[1] == "shape":
        shape = _service_model(words[0]).shape_for(words[2])
    else:
        assert len(words) == 2, f"{block.doc}:{block.line}: marker {block.marker!r}"
        shape = _input_shape(words[0], words[1])
    assert _problems(params, shape) == []


def _fenced_blocks(path: Path) -> Iterator[tuple[str, str]]:
    """(language, text) of each fenced block of the page."""
    for match in re.finditer(r"^```(\w*)\n(.*?)^```$", path.read_text(encoding="utf-8"), flags=re.M | re.S):
        yield match.group(1), match.group(2)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_json_is_only_in_json_blocks(doc: Path) -> None:
    """A request shown in a block of another language would escape the checks above."""
    for language, text in _fenced_blocks(doc):
        if language != "json":
            with pytest.raises(json.JSONDecodeError):
                json.loads(text)


@pytest.mark.parametrize(
    ("doc", "directory"), [(DOCS[0], ECS), (DOCS[1], SAGEMAKER)], ids=["ecs", "sagemaker"]
)
def test_docs_name_every_file(doc: Path, directory: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    names = {p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()}
    assert {name for name in names if name not in text} == set()


def _set(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    """A copy of `document` with the item at `path` replaced by `value` (or removed, for DELETE)."""
    changed = copy.deepcopy(document)
    parent = changed
    for key in path[:-1]:
        parent = parent[key]
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return changed


class _Delete:
    """The field is removed rather than set (named in test ids, which must be the same in every process)."""

    def __repr__(self) -> str:
        return "DELETE"


DELETE = _Delete()
# One field broken per copy: the validation must catch each (else the checks above prove nothing).
BROKEN = [
    ("deploy/ecs/task-definition.json", ("containerDefinitions", 0, "stopTimeout"), "60"),
    (
        "deploy/ecs/task-definition.json",
        ("containerDefinitions", 0, "portMappings", 0, "containerPort"),
        "8000",
    ),
    ("deploy/ecs/task-definition.json", ("requiresCompatibilities", 0), "FARGATES"),
    ("deploy/ecs/task-definition.json", ("containerDefinition",), []),
    ("deploy/ecs/task-definition.json", ("family",), DELETE),
    ("deploy/ecs/service.json", ("networkConfiguration", "awsvpcConfiguration", "assignPublicIp"), "NO"),
    ("deploy/ecs/scaling-policy.json", ("TargetTrackingScalingPolicyConfiguration", "TargetValue"), "20"),
    (
        "deploy/ecs/scaling-policy.json",
        (
            "TargetTrackingScalingPolicyConfiguration",
            "CustomizedMetricSpecification",
            "Metrics",
            0,
            "MetricStat",
            "Stat",
        ),
        DELETE,
    ),
    ("deploy/ecs/target-group.json", ("HealthCheckPath",), ""),
    ("deploy/sagemaker/model.json", ("PrimaryContainer", "Mode"), "Single"),
    ("deploy/sagemaker/endpoint-config.json", ("ProductionVariants", 0, "InitialInstanceCount"), 0),
    ("deploy/sagemaker/endpoint-config.json", ("ProductionVariants", 0, "InstanceType"), "ml.c6i.huge"),
    ("deploy/sagemaker/scalable-target.json", ("ScalableDimension",), "sagemaker:variant:InstanceCount"),
]


@pytest.mark.parametrize(("name", "path", "value"), BROKEN, ids=lambda v: str(v)[:40])
def test_validation_catches_a_broken_field(name: str, path: tuple[Any, ...], value: Any) -> None:
    service, operation = REQUESTS[name]
    shape = _input_shape(service, operation)
    document = _load(ROOT / name)
    assert _problems(document, shape) == []
    assert _problems(_set(document, path, value), shape) != []


def test_a_broken_doc_block_fails() -> None:
    block = next(b for b in DOC_BLOCKS if not b.marker.startswith("not-a-request"))
    service, _, shape_name = block.marker.split()
    shape = _service_model(service).shape_for(shape_name)
    params = json.loads(block.text)
    assert _problems({**params, "Metric": params["Metrics"]}, shape) != []


# ECS: the task definitions ---------------------------------------------------------------------------------------


def _container(task_definition: Mapping[str, Any], name: str = CONTAINER) -> dict[str, Any]:
    [container] = [c for c in task_definition["containerDefinitions"] if c["name"] == name]
    return dict(container)


def _health_check_url(container: Mapping[str, Any]) -> urllib.parse.SplitResult:
    command = container["healthCheck"]["command"]
    assert command[:3] == ["CMD", "python", "-c"] and len(command) == 4, command
    [url] = re.findall(r"'(http://[^']+)'", command[3])
    return urllib.parse.urlsplit(url)


@pytest.mark.parametrize("name", ["task-definition.json", "task-definition-gpu.json"])
def test_task_definition_runs_modelhost_serve_as_the_image_does(name: str) -> None:
    container = _container(_ecs(name))
    command = container["command"]
    # The image's entrypoint passes arguments starting with "-" to `modelhost serve`.
    assert all(arg.startswith("-") for arg in command), command
    options = parse_serve_args(command)
    assert container["stopTimeout"] > options.exit_timeout_secs
    assert container["stopTimeout"] <= 120  # Fargate's maximum, and what the docs promise for EC2 too
    assert options.model_repositories == ["s3://my-model-bucket/models"]
    ports = {m["containerPort"] for m in container["portMappings"]}
    assert ports == {options.http_port, options.grpc_port, options.metrics_port}
    url = _health_check_url(container)
    assert (url.path, url.port) == ("/v2/health/ready", options.http_port)
    # The python one-liner gives up before ECS does.
    [timeout] = re.findall(r"timeout=(\d+)", container["healthCheck"]["command"][3])
    assert int(timeout) < container["healthCheck"]["timeout"]
    assert container["logConfiguration"]["logDriver"] == "awslogs"


def test_gpu_task_asks_for_a_gpu_on_ec2() -> None:
    task = _ecs("task-definition-gpu.json")
    assert task["requiresCompatibilities"] == ["EC2"]
    assert {"type": "GPU", "value": "1"} in _container(task)["resourceRequirements"]


@pytest.mark.parametrize(("service_file", "task_file", "target_file", "policy_file"), ECS_DEPLOYMENTS)
def test_ecs_files_name_each_other(
    service_file: str, task_file: str, target_file: str, policy_file: str
) -> None:
    service, task = _ecs(service_file), _ecs(task_file)
    target, policy = _ecs(target_file), _ecs(policy_file)
    assert service["taskDefinition"] == task["family"]
    options = parse_serve_args(_container(task)["command"])
    [balancer] = service["loadBalancers"]
    assert (balancer["containerName"], balancer["containerPort"]) == (CONTAINER, options.http_port)
    resource = f"service/{service['cluster']}/{service['serviceName']}"
    assert target["ResourceId"] == policy["ResourceId"] == resource
    assert target["ScalableDimension"] == policy["ScalableDimension"] == "ecs:service:DesiredCount"
    assert target["MinCapacity"] >= 1


def test_target_group_checks_readiness_on_the_http_port() -> None:
    group = _ecs("target-group.json")
    options = parse_serve_args(_container(_ecs("task-definition.json"))["command"])
    assert (group["Port"], group["HealthCheckPath"], group["TargetType"]) == (
        options.http_port,
        "/v2/health/ready",
        "ip",
    )


# ECS: the CloudWatch agent and the scaling policies ---------------------------------------------------------------


def _prometheus_section() -> dict[str, Any]:
    return dict(_load(AGENT / "config.json")["logs"]["metrics_collected"]["prometheus"])


def test_agent_config_is_valid_for_the_agents_schema() -> None:
    schema = _load(AGENT / "amazon-cloudwatch-agent.schema.json")
    validator = jsonschema.Draft4Validator(schema)
    config = _load(AGENT / "config.json")
    assert [e.message for e in validator.iter_errors(config)] == []
    broken = _set(
        config, ("logs", "metrics_collected", "prometheus", "emf_processor", "metric_declarations"), []
    )
    assert [e.message for e in validator.iter_errors(broken)] != []


def test_agent_reads_its_configuration_from_the_parameters_the_docs_create() -> None:
    container = _container(_load(AGENT / "task-definition.json"), "cloudwatch-agent")
    secrets = {s["name"]: s["valueFrom"] for s in container["secrets"]}
    assert _prometheus_section()["prometheus_config_path"] == "env:PROMETHEUS_CONFIG_CONTENT"
    docs = DOCS[0].read_text(encoding="utf-8")
    for variable, file in (
        ("CW_CONFIG_CONTENT", "config.json"),
        ("PROMETHEUS_CONFIG_CONTENT", "prometheus.yaml"),
    ):
        assert len((AGENT / file).read_text(encoding="utf-8")) < SSM_STANDARD_LIMIT
        command = (
            f"--name {secrets[variable]} --type String --value file://deploy/ecs/cloudwatch-agent/{file}"
        )
        assert command in docs
    prometheus = yaml.safe_load((AGENT / "prometheus.yaml").read_text(encoding="utf-8"))
    [job] = prometheus["scrape_configs"]
    [files] = job["file_sd_configs"]
    assert files["files"] == [_prometheus_section()["ecs_service_discovery"]["sd_result_file"]]


def _declaration_for(service_name: str) -> dict[str, Any]:
    """The agent's metric declaration that applies to the series of the service's tasks."""
    declarations = [
        d
        for d in _prometheus_section()["emf_processor"]["metric_declaration"]
        if d["source_labels"] == ["ServiceName"] and re.search(d["label_matcher"], service_name)
    ]
    assert len(declarations) == 1, declarations
    return dict(declarations[0])


@pytest.mark.parametrize(("service_file", "task_file", "target_file", "policy_file"), ECS_DEPLOYMENTS)
def test_agent_discovers_the_service(
    service_file: str, task_file: str, target_file: str, policy_file: str
) -> None:
    service, task = _ecs(service_file), _ecs(task_file)
    [discovery] = _prometheus_section()["ecs_service_discovery"]["service_name_list_for_tasks"]
    assert re.search(discovery["sd_service_name_pattern"], service["serviceName"])
    assert re.search(discovery["sd_container_name_pattern"], CONTAINER)
    options = parse_serve_args(_container(task)["command"])
    assert discovery["sd_metrics_ports"] == str(options.metrics_port)
    assert discovery["sd_metrics_path"] == "/metrics"
    agent_service = _load(AGENT / "service.json")["serviceName"]
    assert not re.search(discovery["sd_service_name_pattern"], agent_service)
    assert _load(AGENT / "service.json")["cluster"] == service["cluster"]


def _metric_stats(policy: Mapping[str, Any]) -> list[dict[str, Any]]:
    spec = policy["TargetTrackingScalingPolicyConfiguration"]["CustomizedMetricSpecification"]
    return [q["MetricStat"] for q in spec["Metrics"] if "MetricStat" in q]


@pytest.mark.parametrize(("service_file", "task_file", "target_file", "policy_file"), ECS_DEPLOYMENTS)
def test_policy_asks_for_what_the_agent_publishes(
    service_file: str, task_file: str, target_file: str, policy_file: str
) -> None:
    service, policy = _ecs(service_file), _ecs(policy_file)
    declaration = _declaration_for(service["serviceName"])
    emf = _prometheus_section()["emf_processor"]
    # What the agent's EMF events carry: ClusterName (the agent adds it), ServiceName (its service discovery).
    labels = {"ClusterName": service["cluster"], "ServiceName": service["serviceName"]}
    stats = _metric_stats(policy)
    assert {s["Metric"]["MetricName"] for s in stats} == {
        "nv_inference_queue_duration_us",
        "nv_inference_request_success",
    }
    for stat in stats:
        metric = stat["Metric"]
        assert metric["Namespace"] == emf["metric_namespace"]
        assert any(re.search(selector, metric["MetricName"]) for selector in declaration["metric_selectors"])
        dimensions = {d["Name"]: d["Value"] for d in metric["Dimensions"]}
        assert sorted(dimensions) in [sorted(names) for names in declaration["dimensions"]]
        assert dimensions == {name: labels[name] for name in dimensions}
        # Each data point is a delta of one series: their Sum over the period is the increase.
        assert stat["Stat"] == "Sum"


# A small evaluator of the CloudWatch metric math the policies use, for one period: + - * / and comparisons on
# numbers, and IF(condition, true, false) evaluating only the branch taken. A division by zero drops the data
# point (None), as CloudWatch does.
_BINARY: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
}
_COMPARE: dict[type, Callable[[float, float], bool]] = {
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}


def metric_math(expression: str, values: Mapping[str, float]) -> float | None:
    return _evaluate(ast.parse(expression, mode="eval").body, values)


def _evaluate(node: ast.expr, values: Mapping[str, float]) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "IF":
        condition, when_true, when_false = node.args
        test = _evaluate(condition, values)
        return None if test is None else _evaluate(when_true if test else when_false, values)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = _evaluate(node.left, values), _evaluate(node.comparators[0], values)
        return None if left is None or right is None else float(_COMPARE[type(node.ops[0])](left, right))
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left, values), _evaluate(node.right, values)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Div):
            return None if right == 0 else left / right
        return _BINARY[type(node.op)](left, right)
    raise ValueError(f"not a metric math expression the policies use: {ast.dump(node)}")


def _policy_expression(policy: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    """The expression the policy tracks, and the metric each of its ids stands for."""
    queries = policy["TargetTrackingScalingPolicyConfiguration"]["CustomizedMetricSpecification"]["Metrics"]
    [returned] = [q for q in queries if q["ReturnData"]]
    metrics = {q["Id"]: q["MetricStat"]["Metric"]["MetricName"] for q in queries if "MetricStat" in q}
    assert all(not q["ReturnData"] for q in queries if "MetricStat" in q)
    names = {
        n.id for n in ast.walk(ast.parse(returned["Expression"], mode="eval")) if isinstance(n, ast.Name)
    }
    assert names - {"IF"} == set(metrics)
    return returned["Expression"], metrics


@pytest.mark.parametrize("policy_file", ["scaling-policy.json", "scaling-policy-gpu.json"])
def test_policy_expression_is_milliseconds_of_queue_per_request_and_zero_when_idle(policy_file: str) -> None:
    expression, metrics = _policy_expression(_ecs(policy_file))
    by_metric = {metric: id_ for id_, metric in metrics.items()}
    queue, requests = by_metric["nv_inference_queue_duration_us"], by_metric["nv_inference_request_success"]
    assert metric_math(expression, {queue: 50_000.0, requests: 10.0}) == pytest.approx(5.0)
    # No requests in the period: 0 (a data point, so the policy can scale in), not a dropped point.
    assert metric_math(expression, {queue: 0.0, requests: 0.0}) == 0.0


# SageMaker ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("model", "config", "endpoint", "target", "policies"), SAGEMAKER_DEPLOYMENTS)
def test_sagemaker_files_name_each_other(
    model: str, config: str, endpoint: str, target: str, policies: list[str]
) -> None:
    model_doc, config_doc, endpoint_doc = _sagemaker(model), _sagemaker(config), _sagemaker(endpoint)
    assert endpoint_doc["EndpointConfigName"] == config_doc["EndpointConfigName"]
    [variant] = config_doc["ProductionVariants"]
    assert variant["ModelName"] == model_doc["ModelName"]
    resource = f"endpoint/{endpoint_doc['EndpointName']}/variant/{variant['VariantName']}"
    target_doc = _sagemaker(target)
    assert target_doc["ResourceId"] == resource
    assert target_doc["ScalableDimension"] == "sagemaker:variant:DesiredInstanceCount"
    for policy in map(_sagemaker, policies):
        assert (policy["ResourceId"], policy["ScalableDimension"]) == (
            resource,
            target_doc["ScalableDimension"],
        )


def test_single_model_environment_starts_the_default_model(tmp_path: Path) -> None:
    container = _sagemaker("model.json")["PrimaryContainer"]
    assert container["Mode"] == "SingleModel" and container["ModelDataUrl"].endswith("/model.tar.gz")
    environment = container["Environment"]
    default = environment["SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"]
    # /opt/ml/model as SageMaker unpacks model.tar.gz: the default model's directory and another one.
    for name in (default, "other"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.pbtxt").write_text(f'name: "{name}"\n')
    launch = sagemaker_launch(environment, model_dir=tmp_path, gpu_count=0)
    options = parse_serve_args(launch.argv)
    assert options.model_repositories == [str(tmp_path)]
    assert f"--load-model={default}" in launch.argv
    assert "--allow-sagemaker=true" in launch.argv


def test_multi_model_environment_starts_an_empty_mme(tmp_path: Path) -> None:
    container = _sagemaker("model-multi-model.json")["PrimaryContainer"]
    assert container["Mode"] == "MultiModel" and container["ModelDataUrl"].endswith("/")
    environment = container["Environment"]
    launch = sagemaker_launch(environment, model_dir=tmp_path, gpu_count=0)
    options = parse_serve_args(launch.argv)
    assert options.model_repositories == [str(MULTI_MODEL_DIR)]
    assert not any(arg.startswith("--load-model") for arg in launch.argv)
    assert shlex.split(environment["SAGEMAKER_TRITON_ADDITIONAL_ARGS"])[0] in launch.argv


# The task definition's command, run --------------------------------------------------------------------------------

SLOW_ITERATIONS = 10  # rounds of the slow model per request: 50 ms of sleep (deploy/slow_load.py)
CLIENTS = 16  # closed-loop clients against the slow model's 2 instances: most requests wait in the queue
STOP_WAIT_S = 300  # how long the SIGTERM test waits for the exit: a bound on a hang, never on the machine's speed


@dataclass
class Task:
    """modelhost started as the task definition starts it, on free ports."""

    process: subprocess.Popen[bytes]
    ports: dict[str, int]  # flag name -> the free port that replaced the file's
    health_check: list[str]  # the container's health check command, for this process's ports
    stop_timeout: int
    log: Path


def _local_command(command: list[str], s3_endpoint: str) -> tuple[list[str], dict[str, int]]:
    """The command with the S3 host of a local store and free ports (bucket and prefix as in the file)."""
    http, grpc, metrics = free_ports(3)
    ports = {"--http-port": http, "--grpc-port": grpc, "--metrics-port": metrics}
    local = []
    for arg in command:
        flag, _, value = arg.partition("=")
        if flag in ports:
            arg = f"{flag}={ports[flag]}"
        elif flag == "--model-repository":
            arg = f"{flag}=s3://{s3_endpoint.removeprefix('http://')}/{value.removeprefix('s3://')}"
        local.append(arg)
    return local, ports


def _run(command: list[str], timeout: float = 10) -> int:
    return subprocess.run(command, capture_output=True, timeout=timeout, check=False).returncode


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Task]:
    container = _container(_ecs("task-definition.json"))
    repository = urllib.parse.urlsplit(parse_serve_args(container["command"]).model_repositories[0])
    models = tmp_path_factory.mktemp("models")
    add_sleeping_slow(models)
    with moto_server() as endpoint:
        upload_directory(s3_client(endpoint), models, repository.netloc, repository.path)
        command, ports = _local_command(container["command"], endpoint)
        # The task's environment, and the dummy credentials in place of the task role's.
        environment = {**aws_test_env(), **{e["name"]: e["value"] for e in container["environment"]}}
        log = tmp_path_factory.mktemp("log") / "server.log"
        with open(log, "wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "modelhost", "serve", *command],
                stdout=output,
                stderr=subprocess.STDOUT,
                env=environment,
            )
        script = container["healthCheck"]["command"][3].replace(":8000/", f":{ports['--http-port']}/")
        try:
            yield Task(process, ports, [sys.executable, "-c", script], container["stopTimeout"], log)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


def _wait_healthy(task: Task, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while _run(task.health_check) != 0:
        assert task.process.poll() is None, task.log.read_text(errors="replace")
        assert time.monotonic() < deadline, task.log.read_text(errors="replace")
        time.sleep(0.5)


def test_health_check_passes_once_the_task_is_ready(task: Task) -> None:
    _wait_healthy(task)
    assert _run(task.health_check) == 0
    with urllib.request.urlopen(
        f"http://127.0.0.1:{task.ports['--http-port']}/v2/models/slow/ready"
    ) as answer:
        assert answer.status == 200


def test_health_check_fails_with_nothing_listening(task: Task) -> None:
    [port] = free_ports(1)
    command = [
        *task.health_check[:2],
        task.health_check[2].replace(f":{task.ports['--http-port']}/", f":{port}/"),
    ]
    assert _run(command) == 1


def _scrape(task: Task) -> str:
    with urllib.request.urlopen(
        f"http://127.0.0.1:{task.ports['--metrics-port']}/metrics", timeout=10
    ) as answer:
        return str(answer.read().decode())


def _totals(text: str, families: set[str]) -> dict[str, float]:
    """Per family, the sum over its series (every model and version): what CloudWatch's Sum adds up once the
    agent has turned each series into deltas and dropped the model/version labels from the dimensions."""
    samples = parse_scrape(text, time.time(), {}).samples
    return {family: sum(value for _, value in samples.get(family, [])) for family in families}


def _period_value(task: Task, expression: str, metrics: Mapping[str, str], seconds: float) -> float | None:
    families = set(metrics.values())
    before = _totals(_scrape(task), families)
    time.sleep(seconds)
    after = _totals(_scrape(task), families)
    return metric_math(expression, {id_: after[m] - before[m] for id_, m in metrics.items()})


def test_policy_signal_rises_under_load_and_is_zero_idle(task: Task) -> None:
    _wait_healthy(task)
    expression, metrics = _policy_expression(_ecs("scaling-policy.json"))
    text = _scrape(task)
    for family in metrics.values():  # counters: the agent sends their deltas, which the policy sums
        assert f"# TYPE {family} counter" in text
    with closed_loop_load(f"127.0.0.1:{task.ports['--http-port']}", CLIENTS, SLOW_ITERATIONS):
        time.sleep(1)
        loaded = _period_value(task, expression, metrics, 3)
    time.sleep(0.5)  # the last requests' statistics are recorded as they complete
    idle = _period_value(task, expression, metrics, 1)
    # Target tracking asks for ceil(tasks x value / target) tasks: more than the one running under this load,
    # and (at 0) the minimum when idle.
    target = _ecs("scaling-policy.json")["TargetTrackingScalingPolicyConfiguration"]["TargetValue"]
    assert loaded is not None and math.ceil(loaded / target) > 1, f"{loaded} ms against a target of {target}"
    assert idle == 0.0


def test_task_stops_on_sigterm_within_stop_timeout(task: Task) -> None:
    # ECS kills the container stopTimeout seconds after its SIGTERM: the server's own bound on draining (its
    # --exit-timeout-secs, after which it stops whatever is still running) ends before that.
    container = _container(_ecs("task-definition.json"))
    assert parse_serve_args(container["command"]).exit_timeout_secs < task.stop_timeout
    _wait_healthy(task)
    task.process.send_signal(signal.SIGTERM)
    assert task.process.wait(STOP_WAIT_S) == 0, task.log.read_text(errors="replace")
