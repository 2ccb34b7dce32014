"""Metrics that python models create with `pb_utils.MetricFamily`, exported on the metrics port.

A family is shared by every instance (and every model) that registers its name; a metric is one label set of a
family, shared too, so two instances counting the same labels add up, as in Triton. Each stub numbers its own
metrics; the registry maps (stub, number) to the shared metric.
"""

from __future__ import annotations

import bisect
import math
import threading
from dataclasses import dataclass, field

from modelhost.errors import InvalidArgument

KINDS = ("COUNTER", "GAUGE", "HISTOGRAM")


@dataclass(slots=True)
class _Metric:
    labels: tuple[tuple[str, str], ...]
    value: float = 0.0
    buckets: list[float] = field(default_factory=list)
    bucket_counts: list[int] = field(default_factory=list)
    count: int = 0


@dataclass(slots=True)
class _Family:
    name: str
    description: str
    kind: str
    metrics: dict[tuple[tuple[str, str], ...], _Metric] = field(default_factory=dict)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(int(value)) if float(value).is_integer() and abs(value) < 2**53 else repr(value)


class CustomMetrics:
    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}
        self._by_stub: dict[tuple[int, int], _Metric] = {}
        self._lock = threading.Lock()

    def register_family(self, name: str, description: str, kind: str) -> None:
        if kind not in KINDS:
            raise InvalidArgument(f"unknown metric kind '{kind}'")
        with self._lock:
            family = self._families.get(name)
            if family is None:
                self._families[name] = _Family(name, description, kind)
            elif family.kind != kind:
                raise InvalidArgument(
                    f"metric family '{name}' already exists as a {family.kind.lower()}, not a {kind.lower()}"
                )

    def register(
        self, stub: int, metric_id: int, family_name: str, labels: dict[str, str], buckets: list[float] | None
    ) -> None:
        with self._lock:
            family = self._families.get(family_name)
            if family is None:
                raise InvalidArgument(f"unknown metric family '{family_name}'")
            # Sorted by name: the metric's identity, and the order the labels are written in, Triton's (a
            # std::map in prometheus-cpp), whatever order the model gave them in.
            key = tuple(sorted((str(k), str(v)) for k, v in labels.items()))
            metric = family.metrics.get(key)
            if metric is None:
                metric = _Metric(key)
                if family.kind == "HISTOGRAM":
                    metric.buckets = sorted(float(b) for b in buckets or ())
                    metric.bucket_counts = [0] * len(metric.buckets)
                family.metrics[key] = metric
            self._by_stub[(stub, metric_id)] = metric

    def update(self, stub: int, metric_id: int, op: str, value: float) -> None:
        with self._lock:
            metric = self._by_stub.get((stub, metric_id))
            if metric is None:
                return
            if op == "increment":
                metric.value += value
            elif op == "set":
                metric.value = value
            elif op == "observe":
                metric.value += value  # the sum
                metric.count += 1
                index = bisect.bisect_left(metric.buckets, value)
                for i in range(index, len(metric.buckets)):
                    metric.bucket_counts[i] += 1

    def value(self, stub: int, metric_id: int) -> float:
        with self._lock:
            metric = self._by_stub.get((stub, metric_id))
            return 0.0 if metric is None else metric.value

    def forget_stub(self, stub: int) -> None:
        """A stub that went away: its numbers mean nothing now (the metrics and their values stay)."""
        with self._lock:
            for key in [k for k in self._by_stub if k[0] == stub]:
                del self._by_stub[key]

    def render(self) -> list[str]:
        lines: list[str] = []
        with self._lock:
            for family in self._families.values():
                lines.append(f"# HELP {family.name} {family.description}")
                lines.append(f"# TYPE {family.name} {family.kind.lower()}")
                for metric in family.metrics.values():
                    labels = ",".join(f'{k}="{_escape(v)}"' for k, v in metric.labels)
                    braced = f"{{{labels}}}" if labels else ""  # no labels: no braces, as prometheus-cpp
                    if family.kind != "HISTOGRAM":
                        lines.append(f"{family.name}{braced} {_number(metric.value)}")
                        continue
                    # Triton's order: count, sum, then the buckets, their `le` after the metric's labels.
                    sep = "," if labels else ""
                    lines.append(f"{family.name}_count{braced} {metric.count}")
                    lines.append(f"{family.name}_sum{braced} {_number(metric.value)}")
                    for bound, count in zip(metric.buckets, metric.bucket_counts, strict=True):
                        lines.append(f'{family.name}_bucket{{{labels}{sep}le="{_number(bound)}"}} {count}')
                    lines.append(f'{family.name}_bucket{{{labels}{sep}le="+Inf"}} {metric.count}')
        return lines
