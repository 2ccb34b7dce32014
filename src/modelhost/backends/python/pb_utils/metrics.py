"""Custom metrics: MetricFamily and its Metric, with Triton's checks of kinds, labels and buckets; the values live
in the server (through the runtime)."""

from __future__ import annotations

import enum
import itertools
import math
import re
from typing import ClassVar

from modelhost.backends.python.pb_utils.errors import TritonModelException
from modelhost.backends.python.pb_utils.runtime import require_runtime


class MetricKind(enum.IntEnum):
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


COUNTER = MetricKind.COUNTER
GAUGE = MetricKind.GAUGE
HISTOGRAM = MetricKind.HISTOGRAM

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_CORE_KIND = {kind: f"TRITONSERVER_METRIC_KIND_{kind.name}" for kind in MetricKind}


def _metric_value(value: object, method: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{method}(): value must be a number, not {type(value).__name__}")
    return float(value)


class Metric:
    """One metric (one set of label values) of a MetricFamily; made by `family.Metric(labels, buckets)`."""

    def __init__(self, family: MetricFamily, metric_id: int) -> None:
        self._family = family
        self._id = metric_id

    def _update(self, op: str, value: float, failure: str) -> None:
        try:
            require_runtime("Metric").update_metric(self._id, op, value)
        except TritonModelException as e:
            raise TritonModelException(f"{failure}: {e}") from e

    def increment(self, value: float) -> None:
        amount = _metric_value(value, "increment")
        kind = self._family._kind
        failure = "Failed to increment metric value"
        if kind == MetricKind.COUNTER and amount < 0.0:
            raise TritonModelException(
                f"{failure}: TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by "
                "non-negative values."
            )
        if kind == MetricKind.HISTOGRAM:
            raise TritonModelException(
                f"{failure}: TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Increment"
            )
        self._update("increment", amount, failure)

    def set(self, value: float) -> None:
        self._update_of_one_kind(MetricKind.GAUGE, "set", "Set", value)

    def observe(self, value: float) -> None:
        self._update_of_one_kind(MetricKind.HISTOGRAM, "observe", "Observe", value)

    def _update_of_one_kind(self, only: MetricKind, op: str, core_name: str, value: float) -> None:
        """An update only a metric of kind `only` takes (core's `TRITONSERVER_MetricSet` / `...Observe`, named
        `core_name` in its message)."""
        amount = _metric_value(value, op)
        kind = self._family._kind
        failure = f"Failed to {op} metric value"
        if kind != only:
            raise TritonModelException(f"{failure}: {_CORE_KIND[kind]} does not support {core_name}")
        self._update(op, amount, failure)

    def value(self) -> float:
        failure = "Failed to get metric value"
        if self._family._kind == MetricKind.HISTOGRAM:
            raise TritonModelException(
                f"{failure}: TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value"
            )
        try:
            return float(require_runtime("Metric").metric_value(self._id))
        except TritonModelException as e:
            raise TritonModelException(f"{failure}: {e}") from e


_MetricClass = Metric  # MetricFamily's method `Metric` hides the class name inside that class


class MetricFamily:
    """A custom metric family on the metrics endpoint: `MetricFamily(name, description, MetricFamily.COUNTER)`."""

    COUNTER: ClassVar[MetricKind] = MetricKind.COUNTER
    GAUGE: ClassVar[MetricKind] = MetricKind.GAUGE
    HISTOGRAM: ClassVar[MetricKind] = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        if not isinstance(name, str) or not isinstance(description, str):
            raise TypeError("MetricFamily(): name and description must be str")
        if not isinstance(kind, MetricKind):
            raise TypeError(
                f"MetricFamily(): kind must be MetricFamily.COUNTER, GAUGE or HISTOGRAM, not {kind!r}"
            )
        failure = "Error when creating MetricFamily"
        if not _METRIC_NAME.match(name):
            raise TritonModelException(f"{failure}: Invalid metric name")
        try:
            require_runtime("MetricFamily").register_metric_family(name, description, kind.name)
        except TritonModelException as e:
            raise TritonModelException(f"{failure}: {e}") from e
        self._name = name
        self._description = description
        self._kind = kind

    def Metric(  # Triton's name for the method
        self, labels: dict[str, str] | None = None, buckets: list[float] | None = None
    ) -> _MetricClass:
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if self._kind != MetricKind.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Unexpected buckets found.")
        elif self._kind == MetricKind.HISTOGRAM:
            raise TritonModelException("Failed to create metric. Missing required buckets.")
        failure = "Error when creating Metric"
        label_map = dict(labels or {})
        for key, value in label_map.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TritonModelException(f"{failure}: label names and values must be strings")
        bucket_list: list[float] | None = None
        if buckets is not None:
            bucket_list = [_metric_value(b, "Metric") for b in buckets]
            if any(math.isnan(b) for b in bucket_list) or any(
                a >= b for a, b in itertools.pairwise(bucket_list)
            ):
                raise TritonModelException(f"{failure}: Bucket Boundaries must be strictly sorted")
        try:
            metric_id = require_runtime("Metric").register_metric(self._name, label_map, bucket_list)
        except TritonModelException as e:
            raise TritonModelException(f"{failure}: {e}") from e
        return _MetricClass(self, metric_id)
