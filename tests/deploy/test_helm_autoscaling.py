"""The chart's autoscaling signal is real: modelhost serves a model under load and then idle, its `/metrics` is scraped
twice in each state (with the labels a ServiceMonitor scrape attaches), and the query the chart renders for each
engine and signal (the prometheus-adapter rule behind the HPA, the KEDA trigger's query) is evaluated on those
scrapes. The replica count the autoscaler would ask for, ceil(replicas x value / target), must rise above one
under load and fall back to one when idle."""

from __future__ import annotations

import math
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from deploy.helm_chart import NAMESPACE, RELEASE, fetch_helm, only, render
from deploy.promql_eval import Scrape, Vector, evaluate, parse_scrape
from deploy.slow_load import add_sleeping_slow, closed_loop_load
from e2e.server_process import RunningServer, running_server

FULLNAME = f"{RELEASE}-modelhost"
POD = f"{FULLNAME}-7c9d8f6b5-x2x4q"
# What Prometheus attaches to every series of the pod when the chart's ServiceMonitor scrapes it.
TARGET_LABELS = {
    "namespace": NAMESPACE,
    "pod": POD,
    "service": FULLNAME,
    "job": FULLNAME,
    "endpoint": "metrics",
}
SIGNALS = ("queueComputeRatio", "queueTimePerRequest", "pendingRequestsPerPod")
ENGINES = ("hpa", "keda")
CLIENTS = 16  # closed-loop clients against the model's 2 instances: most requests wait in the queue
ITERATIONS = 4  # rounds of the slow model per request: 20 ms of sleep (deploy/slow_load.py)
REPLICAS = 1  # the Deployment's replicas when the scrapes are taken (one pod, this server)


@dataclass(frozen=True)
class Scrapes:
    loaded: list[Scrape]
    idle: list[Scrape]


def _scrape(server: RunningServer) -> Scrape:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return parse_scrape(text, time.time(), TARGET_LABELS)


@pytest.fixture(scope="module")
def scrapes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scrapes]:
    repo = tmp_path_factory.mktemp("repo")
    add_sleeping_slow(repo)
    with running_server([repo], tmp_path_factory.mktemp("log") / "server.log") as server:
        with closed_loop_load(server.http_url, CLIENTS, ITERATIONS):
            time.sleep(2)  # every client has a request in flight
            loaded = [_scrape(server)]
            time.sleep(4)
            loaded.append(_scrape(server))
        time.sleep(1)  # the server has recorded the last requests' statistics
        idle = [_scrape(server)]
        time.sleep(4)
        idle.append(_scrape(server))
        yield Scrapes(loaded, idle)


@dataclass(frozen=True)
class Autoscaler:
    """What the rendered chart asks the autoscaler to do: the query it evaluates and the target it holds."""

    query: str
    target: float
    series_query: str | None  # prometheus-adapter's discovery query (HPA only)

    def value(self, scrapes: list[Scrape]) -> float:
        result = evaluate(self.query, scrapes)
        assert isinstance(result, dict), f"{self.query} gave a scalar"
        return _one(result, self.query)

    def desired_replicas(self, value: float) -> int:
        # The HPA's rule (KEDA hands its metric to an HPA too), with its default 10% tolerance.
        ratio = value / self.target
        if abs(ratio - 1) <= 0.1:
            return REPLICAS
        return max(1, math.ceil(REPLICAS * ratio))


def _one(vector: Vector, query: str) -> float:
    """The pod's value (HPA: per-pod series) or the fleet's (KEDA: one series)."""
    pods = {dict(labels).get("pod") for labels in vector}
    assert len(vector) == 1 and pods <= {POD, None}, f"{query} gave {vector}"
    return next(iter(vector.values()))


def _quantity(text: str) -> float:
    return int(text[:-1]) / 1000 if text.endswith("m") else float(text)


def _autoscaler(documents: list[dict[str, Any]], engine: str) -> Autoscaler:
    if engine == "hpa":
        (metric,) = only(documents, "HorizontalPodAutoscaler")["spec"]["metrics"]
        (rule,) = yaml.safe_load(only(documents, "ConfigMap")["data"]["config.yaml"])["rules"]
        assert rule["name"]["as"] == metric["pods"]["metric"]["name"]
        # What prometheus-adapter substitutes when the HPA asks for the metric of its pods.
        query = (
            rule["metricsQuery"]
            .replace("<<.LabelMatchers>>", f'namespace="{NAMESPACE}",pod=~"{POD}"')
            .replace("<<.GroupBy>>", "pod")
        )
        return Autoscaler(query, _quantity(metric["pods"]["target"]["averageValue"]), rule["seriesQuery"])
    (trigger,) = only(documents, "ScaledObject")["spec"]["triggers"]
    return Autoscaler(trigger["metadata"]["query"], float(trigger["metadata"]["threshold"]), None)


@pytest.fixture(scope="module")
def autoscalers() -> dict[tuple[str, str], Autoscaler]:
    binary = fetch_helm()
    return {
        (engine, signal): _autoscaler(
            render(
                binary,
                None,
                "autoscaling.enabled=true",
                f"autoscaling.engine={engine}",
                f"autoscaling.signal={signal}",
                "autoscaling.model=slow",
                # Targets well under what the load gives (ratio ~10, ~20 ms, ~13 pending in a quiet run), so a
                # busy CI machine still shows the rise; the defaults are the chart's to document, not to test.
                "autoscaling.targets.queueTimePerRequest=2000",
                "autoscaling.targets.pendingRequestsPerPod=2",
            ),
            engine,
        )
        for engine in ENGINES
        for signal in SIGNALS
    }


@pytest.mark.parametrize("signal", SIGNALS)
@pytest.mark.parametrize("engine", ENGINES)
def test_replicas_rise_under_load_and_fall_back_when_idle(
    scrapes: Scrapes, autoscalers: dict[tuple[str, str], Autoscaler], engine: str, signal: str
) -> None:
    autoscaler = autoscalers[(engine, signal)]
    loaded = autoscaler.value(scrapes.loaded)
    idle = autoscaler.value(scrapes.idle)
    assert autoscaler.desired_replicas(loaded) > 1, (
        f"{signal} under load: {loaded} against {autoscaler.target}"
    )
    assert idle == 0, f"{signal} idle: {idle}"
    assert autoscaler.desired_replicas(idle) == 1


@pytest.mark.parametrize("signal", SIGNALS)
def test_the_adapter_discovers_the_series_the_rule_names(
    scrapes: Scrapes, autoscalers: dict[tuple[str, str], Autoscaler], signal: str
) -> None:
    series_query = autoscalers[("hpa", signal)].series_query
    assert series_query is not None
    found = evaluate(series_query, scrapes.loaded[-1:])
    assert isinstance(found, dict) and found, f"{series_query} finds no series on modelhost's /metrics"


def test_the_signals_measure_the_load(
    scrapes: Scrapes, autoscalers: dict[tuple[str, str], Autoscaler]
) -> None:
    """Under load the three signals agree with each other: most of the 16 clients' requests wait for one of the
    model's two instances, so waiting takes several times longer than computing, and the fleet-wide values
    (KEDA) equal the one pod's (HPA)."""
    values = {key: autoscaler.value(scrapes.loaded) for key, autoscaler in autoscalers.items()}
    assert values[("hpa", "queueComputeRatio")] > 2
    assert values[("hpa", "pendingRequestsPerPod")] >= 4
    for signal in SIGNALS:
        assert values[("keda", signal)] == pytest.approx(values[("hpa", signal)])
