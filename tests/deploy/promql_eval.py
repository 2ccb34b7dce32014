"""A small PromQL evaluator over a few scrapes of `/metrics`: enough to compute the chart's autoscaling signals
as Prometheus would, from what a running modelhost really exports.

The query is parsed by promql-parser (the Rust PromQL parser, so a query Prometheus refuses fails here too);
evaluation covers what the chart's queries use: selectors with =, !=, =~, !~ matchers; rate/irate/increase/delta
over a range; clamp_min/clamp_max; sum/avg/min/max/count with by/without; + - * / and comparison filters between
vectors (one-to-one on equal label sets) and scalars. rate() is the slope between the first and last sample in the
range with counter resets handled, without Prometheus' extrapolation to the range's edges (with samples a few
seconds apart the two differ by well under the targets' margins). Anything else raises, so a chart query that
grows beyond this is noticed, not mis-evaluated.
"""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import promql_parser
from prometheus_client.parser import text_string_to_metric_families

Labels = frozenset[tuple[str, str]]
Vector = dict[Labels, float]
Value = Vector | float


@dataclass(frozen=True)
class Scrape:
    time: float
    samples: dict[str, list[tuple[Labels, float]]]  # metric name -> (labels, value) per series


def parse_scrape(text: str, time: float, target_labels: Mapping[str, str]) -> Scrape:
    """One scrape of a Prometheus text exposition, with the labels Prometheus attaches to the target's series
    (namespace, pod, service... from the ServiceMonitor) added to each."""
    # prometheus_client names counter samples <family>_total even where the exposition does not (Triton's
    # counters have no suffix); Prometheus keeps the names as exposed, so they are taken back from the text.
    exposed = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)", text, flags=re.M))
    samples: dict[str, list[tuple[Labels, float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if name not in exposed and name.removesuffix("_total") in exposed:
                name = name.removesuffix("_total")
            labels = frozenset({**sample.labels, **target_labels}.items())
            samples.setdefault(name, []).append((labels, float(sample.value)))
    return Scrape(time, samples)


def evaluate(query: str, scrapes: list[Scrape]) -> Value:
    """The query's value at the time of the last scrape."""
    ordered = sorted(scrapes, key=lambda s: s.time)
    return _Evaluator(ordered).eval(promql_parser.parse(query))


_ARITHMETIC: dict[str, Callable[[float, float], float]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": lambda a, b: a / b if b else (float("nan") if a == 0 else float("inf") if a > 0 else float("-inf")),
}
_COMPARISON: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    "<": operator.lt,
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}


def _matches(labels: Labels, matchers: Any) -> bool:
    values = dict(labels)
    for matcher in matchers.matchers:
        value = values.get(matcher.name, "")
        op = str(matcher.op).rsplit(".", 1)[-1]
        if op == "Equal":
            ok = value == matcher.value
        elif op == "NotEqual":
            ok = value != matcher.value
        elif op == "Re":
            ok = re.fullmatch(matcher.value, value) is not None
        elif op == "NotRe":
            ok = re.fullmatch(matcher.value, value) is None
        else:
            raise NotImplementedError(f"matcher {matcher.op}")
        if not ok:
            return False
    return True


def _without_name(labels: Labels) -> Labels:
    return frozenset((k, v) for k, v in labels if k != "__name__")


class _Evaluator:
    def __init__(self, scrapes: list[Scrape]) -> None:
        if not scrapes:
            raise ValueError("no scrapes to evaluate over")
        self.scrapes = scrapes
        self.now = scrapes[-1].time

    def eval(self, node: Any) -> Value:
        kind = type(node).__name__
        method: Callable[[Any], Value] | None = getattr(self, f"_{kind}", None)
        if method is None:
            raise NotImplementedError(f"{kind}: {node}")
        return method(node)

    def _NumberLiteral(self, node: Any) -> Value:
        return float(node.val)

    def _ParenExpr(self, node: Any) -> Value:
        return self.eval(node.expr)

    def _series(self, selector: Any, scrape: Scrape) -> Vector:
        return {
            labels | {("__name__", selector.name)}: value
            for labels, value in scrape.samples.get(selector.name, [])
            if _matches(labels, selector.matchers)
        }

    def _VectorSelector(self, node: Any) -> Value:
        if node.offset is not None or node.at is not None:
            raise NotImplementedError(f"offset/@ in {node}")
        return self._series(node, self.scrapes[-1])

    def _range(self, node: Any) -> dict[Labels, list[tuple[float, float]]]:
        start = self.now - node.range.total_seconds()
        points: dict[Labels, list[tuple[float, float]]] = {}
        for scrape in self.scrapes:
            if scrape.time >= start:
                for labels, value in self._series(node.vector_selector, scrape).items():
                    points.setdefault(labels, []).append((scrape.time, value))
        return points

    def _Call(self, node: Any) -> Value:
        name = node.func.name
        if name in ("rate", "irate", "increase", "delta"):
            (matrix,) = node.args
            if type(matrix).__name__ != "MatrixSelector":
                raise NotImplementedError(f"{name} of {matrix}")
            out: Vector = {}
            for labels, points in self._range(matrix).items():
                if name == "irate":
                    points = points[-2:]
                if len(points) < 2:
                    continue  # as Prometheus: a series needs two samples in the range
                change = points[-1][1] - points[0][1]
                if name != "delta":  # counters: a drop is a reset, the counter restarted from 0
                    change = sum(b - a if b >= a else b for (_, a), (_, b) in itertools.pairwise(points))
                elapsed = points[-1][0] - points[0][0]
                out[_without_name(labels)] = change / elapsed if name in ("rate", "irate") else change
            return out
        if name in ("clamp_min", "clamp_max"):
            vector, bound = self.eval(node.args[0]), self.eval(node.args[1])
            if not isinstance(vector, dict) or isinstance(bound, dict):
                raise NotImplementedError(f"{name} needs a vector and a scalar")
            clamp = max if name == "clamp_min" else min
            return {_without_name(labels): clamp(value, bound) for labels, value in vector.items()}
        raise NotImplementedError(f"function {name}")

    def _AggregateExpr(self, node: Any) -> Value:
        op = str(node.op)
        if node.param is not None:
            raise NotImplementedError(f"{op} with a parameter")
        vector = self.eval(node.expr)
        if not isinstance(vector, dict):
            raise NotImplementedError(f"{op} of a scalar")
        modifier = node.modifier
        by = modifier is None or "By" in str(modifier.type)
        names = set(modifier.labels) if modifier is not None else set()
        groups: dict[Labels, list[float]] = {}
        for labels, value in vector.items():
            key = frozenset(
                (k, v) for k, v in labels if k != "__name__" and ((k in names) if by else (k not in names))
            )
            groups.setdefault(key, []).append(value)
        reduce: dict[str, Callable[[list[float]], float]] = {
            "sum": sum,
            "avg": lambda v: sum(v) / len(v),
            "min": min,
            "max": max,
            "count": lambda v: float(len(v)),
        }
        if op not in reduce:
            raise NotImplementedError(f"aggregation {op}")
        return {key: reduce[op](values) for key, values in groups.items()}

    def _BinaryExpr(self, node: Any) -> Value:
        op = str(node.op)
        if node.modifier is not None:
            raise NotImplementedError(f"vector matching modifiers in {node}")
        lhs, rhs = self.eval(node.lhs), self.eval(node.rhs)
        if op in _ARITHMETIC:
            f = _ARITHMETIC[op]
            return self._combine(lhs, rhs, lambda a, b: f(a, b), keep_lhs=False)
        if op in _COMPARISON:
            test = _COMPARISON[op]
            if not isinstance(lhs, dict):
                raise NotImplementedError("comparisons with a scalar on the left, or of two scalars")
            return self._combine(lhs, rhs, lambda a, b: a if test(a, b) else None, keep_lhs=True)
        raise NotImplementedError(f"operator {op}")

    def _combine(
        self, lhs: Value, rhs: Value, f: Callable[[float, float], float | None], keep_lhs: bool
    ) -> Value:
        if not isinstance(lhs, dict) and not isinstance(rhs, dict):
            result = f(lhs, rhs)
            assert result is not None
            return result
        out: Vector = {}
        if isinstance(lhs, dict) and isinstance(rhs, dict):
            right = {_without_name(k): v for k, v in rhs.items()}
            for labels, a in lhs.items():
                key = _without_name(labels)
                if key in right and (value := f(a, right[key])) is not None:
                    out[labels if keep_lhs else key] = value
            return out
        if isinstance(lhs, dict):
            assert not isinstance(rhs, dict)
            for labels, a in lhs.items():
                if (value := f(a, rhs)) is not None:
                    out[labels if keep_lhs else _without_name(labels)] = value
            return out
        assert isinstance(rhs, dict)
        for labels, b in rhs.items():
            if (value := f(lhs, b)) is not None:
                out[labels if keep_lhs else _without_name(labels)] = value
        return out
