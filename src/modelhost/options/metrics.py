"""`--metrics-config <setting>=<value>`: which latency families the metrics endpoint exports, as tritonserver.

Settings (tritonserver's names and defaults):

    counter_latencies    true   the cumulative *_duration_us counters
    histogram_latencies  false  nv_inference_first_response_histogram_ms (decoupled models only)
    summary_latencies    false  the *_summary_us summaries
    summary_quantiles    0.5:0.05,0.9:0.01,0.95:0.001,0.99:0.001,0.999:0.001   <quantile>:<error>,...

tritonserver ignores what it does not know (and logs an error for a malformed quantile); modelhost refuses
an unknown setting or a bad value at startup instead, so that a typo never silently leaves a family off.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

Quantiles = tuple[tuple[float, float], ...]

DEFAULT_QUANTILES: Quantiles = ((0.5, 0.05), (0.9, 0.01), (0.95, 0.001), (0.99, 0.001), (0.999, 0.001))
BOOLEAN_SETTINGS = ("counter_latencies", "histogram_latencies", "summary_latencies")
SETTINGS = (*BOOLEAN_SETTINGS, "summary_quantiles")
_TRUE = ("true", "on", "1")
_FALSE = ("false", "off", "0")


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    counter_latencies: bool = True
    histogram_latencies: bool = False
    summary_latencies: bool = False
    summary_quantiles: Quantiles = DEFAULT_QUANTILES


def parse_metrics_config(settings: Mapping[str, str]) -> MetricsConfig:
    """The settings given to --metrics-config (setting -> value, the last given of each); ValueError names
    every problem."""
    problems: list[str] = []
    values: dict[str, object] = {}
    for key, raw in settings.items():
        value = raw.strip().strip('"').strip()
        if key in BOOLEAN_SETTINGS:
            lowered = value.lower()
            if lowered in _TRUE or lowered in _FALSE:
                values[key] = lowered in _TRUE
            else:
                problems.append(f"--metrics-config {key} must be true or false, got {raw!r}")
        elif key == "summary_quantiles":
            try:
                values[key] = parse_quantiles(value)
            except ValueError as e:
                problems.append(f"--metrics-config summary_quantiles: {e}")
        else:
            problems.append(f"--metrics-config: unknown setting {key!r} (known: {', '.join(SETTINGS)})")
    if problems:
        raise ValueError("; ".join(problems))
    return MetricsConfig(**values)  # type: ignore[arg-type]


_NUMBER_PREFIX = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def _stod(text: str) -> float:
    """A number as tritonserver reads it (std::stod): the longest numeric prefix, the rest ignored ("0.0.1" is
    0.0, as Triton's L0_metrics passes it); ValueError when there is none."""
    match = _NUMBER_PREFIX.match(text)
    if match is None:
        raise ValueError(text)
    return float(match.group())


def parse_quantiles(text: str) -> Quantiles:
    """`<quantile>:<error>,...`, each number in [0, 1]: tritonserver's format for summary_quantiles."""
    pairs: list[tuple[float, float]] = []
    for part in text.split(","):
        quantile_text, colon, error_text = part.strip().partition(":")
        if not colon:
            raise ValueError(f"{part.strip()!r} has no ':'; the format is <quantile>:<error>,...")
        try:
            quantile, error = _stod(quantile_text), _stod(error_text)
        except ValueError:
            raise ValueError(f"{part.strip()!r} is not <quantile>:<error> with two numbers") from None
        if not (0.0 <= quantile <= 1.0 and 0.0 <= error <= 1.0):  # NaN fails too
            raise ValueError(f"{part.strip()!r}: quantile and error must be between 0 and 1")
        pairs.append((quantile, error))
    return tuple(pairs)
