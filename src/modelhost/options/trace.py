"""Trace settings, as Triton has them: from `--trace-config`, and changed at run time through the trace API.

Global settings, and per model a partial override (a setting the model does not override follows the global one).
Over the API every value is a string (`trace_level` a list of strings), as in Triton's JSON; a bad update is
refused whole, with the settings left as they were.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from modelhost.errors import InvalidArgument, Unsupported

LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")
MODES = ("triton", "opentelemetry")
# The API's names of the settings, and the field each sets.
_API_FIELDS = {
    "trace_level": "level",
    "trace_rate": "rate",
    "trace_count": "count",
    "log_frequency": "log_frequency",
    "trace_file": "file",
    "trace_mode": "mode",
}


@dataclass(frozen=True, slots=True)
class TraceSettings:
    level: tuple[str, ...] = ("OFF",)
    rate: int = 1000  # trace one request of every `rate`
    count: int = -1  # traces left to take (-1: no limit)
    log_frequency: int = 0  # traces per file (0: one file, written at shutdown)
    file: str = ""
    mode: str = "triton"

    @property
    def on(self) -> bool:
        return any(level != "OFF" for level in self.level) and self.count != 0

    @property
    def tensors(self) -> bool:
        return "TENSORS" in self.level

    def to_json(self, otel: OpenTelemetrySettings | None = None) -> dict[str, Any]:
        """Triton's JSON: strings; in opentelemetry mode the collector's settings instead of the file's."""
        common = {
            "trace_level": list(self.level),
            "trace_rate": str(self.rate),
            "trace_count": str(self.count),
        }
        if self.mode == "opentelemetry" and otel is not None:
            url = otel.url.removeprefix("http://")
            return {
                **common,
                "trace_mode": self.mode,
                "url": url,
                **{k: str(v) for k, v in otel.batch_settings.items()},
            }
        return {
            **common,
            "log_frequency": str(self.log_frequency),
            "trace_file": self.file,
            "trace_mode": self.mode,
        }


@dataclass(frozen=True, slots=True)
class OpenTelemetrySettings:
    url: str = "http://localhost:4318/v1/traces"
    resource: dict[str, str] = field(default_factory=dict)
    # Batch span processor settings: bsp_max_queue_size, bsp_schedule_delay (ms), bsp_max_export_batch_size.
    batch: dict[str, int] = field(default_factory=dict)

    @property
    def batch_settings(self) -> dict[str, int]:
        """The batch span processor settings in force (the SDK's defaults where not given), as Triton shows them."""
        defaults = {"bsp_max_export_batch_size": 512, "bsp_schedule_delay": 5000, "bsp_max_queue_size": 2048}
        return {**defaults, **self.batch}


# The other words tritonserver's command line takes for a trace level (any case; MIN and MAX are the levels of
# its older releases, both TIMESTAMPS now).
_CLI_LEVEL_ALIASES = {
    "FALSE": "OFF",
    "TRUE": "TIMESTAMPS",
    "ON": "TIMESTAMPS",
    "MIN": "TIMESTAMPS",
    "MAX": "TIMESTAMPS",
}


def _level(values: list[str]) -> tuple[str, ...]:
    levels = tuple(v.upper() for v in values)
    for level in levels:
        if level not in LEVELS:
            # Triton drops an unknown level silently; a typo that turns tracing off deserves an answer.
            raise InvalidArgument(f"invalid trace level '{level}': expected OFF, TIMESTAMPS or TENSORS")
    if "OFF" in levels and len(levels) > 1:
        raise InvalidArgument("Expect only one trace level 'OFF' is specified")
    return levels or ("OFF",)


def _integer(name: str, value: str, minimum: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"Unable to parse '{name}', got: {value}") from None
    if number >= 2**32:  # Triton keeps them in 32 bits
        raise InvalidArgument(f"Unable to parse '{name}', got: {value} (at most {2**32 - 1})")
    if number < minimum:
        if name == "trace_rate":
            raise InvalidArgument("Attempting to set invalid trace setting :sample rate must be non-zero")
        raise InvalidArgument(f"Unable to parse '{name}'. Expecting value >= {minimum}, got: {value}")
    return number


def _value(name: str, raw: Any) -> Any:
    """One setting of an API update, checked; `raw` as the JSON gave it."""
    if name == "trace_file":
        raise Unsupported("trace file location can not be updated through network protocol")
    if name == "trace_level":
        if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
            raise InvalidArgument("trace setting 'trace_level' must be an array of strings")
        return _level(raw) if raw else None
    if not isinstance(raw, str):
        raise InvalidArgument(f"trace setting '{name}' must be a string, as in Triton's trace extension")
    if name == "trace_rate":
        return _integer(name, raw, 1)
    if name == "trace_count":
        if raw.strip() == "0":
            raise InvalidArgument("Attempting to set invalid trace setting :trace count must not be 0")
        return _integer(name, raw, -1)
    if name == "log_frequency":
        return _integer(name, raw, 0)
    raise InvalidArgument("trace setting 'trace_mode' cannot be changed at run time")


def parse_update(body: Any) -> dict[str, Any]:
    """The settings a POST to the trace API changes: field name -> value, None to reset it (a model's setting
    back to the global one, a global one back to its value at startup). Raises on anything wrong (400; a
    trace file 501, as in Triton), before anything changes."""
    if not isinstance(body, dict):
        raise InvalidArgument("trace settings must be a JSON object")
    changes: dict[str, Any] = {}
    for name, raw in body.items():
        if name not in _API_FIELDS:
            raise InvalidArgument(f"unknown trace setting '{name}'")
        changes[_API_FIELDS[name]] = None if raw is None else _value(name, raw)
    return changes


def apply(
    settings: TraceSettings, changes: dict[str, Any], reset: TraceSettings | None = None
) -> TraceSettings:
    """`settings` with `changes`; a None change takes its value from `reset` (when given)."""
    values = {k: v for k, v in changes.items() if v is not None}
    if reset is not None:
        values.update({k: getattr(reset, k) for k, v in changes.items() if v is None})
    return dataclasses.replace(settings, **values)


def parse_trace_config(values: list[str]) -> tuple[TraceSettings, OpenTelemetrySettings]:
    """`--trace-config [<mode>,]<setting>=<value>` (repeated), and the deprecated flags mapped onto it by the CLI.
    Raises ValueError with a message for the command line."""
    settings = TraceSettings()
    otel = OpenTelemetrySettings()
    levels: list[str] = []
    global_fields: dict[str, Any] = {}
    triton_fields: dict[str, Any] = {}
    resource: dict[str, str] = {}
    batch: dict[str, int] = {}
    url = otel.url
    for value in values:
        scope, setting = "", value
        head, _, rest = value.partition(",")
        if rest and "=" not in head:
            scope, setting = head, rest
        key, sep, raw = setting.partition("=")
        if not sep:
            raise ValueError(f"invalid --trace-config '{value}': expected [<mode>,]<setting>=<value>")
        try:
            if scope == "":
                if key == "level":
                    levels.append(raw)
                elif key == "rate":
                    global_fields["rate"] = _integer("trace_rate", raw, 1)
                elif key == "count":
                    global_fields["count"] = _integer("trace_count", raw, -1)
                elif key == "mode":
                    if raw not in MODES:
                        raise ValueError(f"invalid trace mode '{raw}': expected triton or opentelemetry")
                    global_fields["mode"] = raw
                else:
                    raise ValueError(f"unknown trace setting '{key}'")
            elif scope == "triton":
                if key == "file":
                    triton_fields["file"] = raw
                elif key == "log-frequency":
                    triton_fields["log_frequency"] = _integer("log_frequency", raw, 0)
                else:
                    raise ValueError(f"unknown triton trace setting '{key}'")
            elif scope == "opentelemetry":
                if key == "url":
                    url = raw if "://" in raw else "http://" + raw
                elif key == "resource":
                    name, eq, text = raw.partition("=")
                    if not eq:
                        raise ValueError(f"invalid opentelemetry resource '{raw}': expected <key>=<value>")
                    resource[name] = text
                elif key in ("bsp_max_queue_size", "bsp_schedule_delay", "bsp_max_export_batch_size"):
                    batch[key] = _integer(key, raw, 0)
                else:
                    raise ValueError(f"unknown opentelemetry trace setting '{key}'")
            else:
                raise ValueError(f"unknown trace mode '{scope}' in --trace-config '{value}'")
        except InvalidArgument as e:
            raise ValueError(str(e)) from None
    if levels:
        try:
            global_fields["level"] = _level([_CLI_LEVEL_ALIASES.get(v.upper(), v) for v in levels])
        except InvalidArgument as e:
            raise ValueError(str(e)) from None
    settings = dataclasses.replace(settings, **global_fields, **triton_fields)
    otel = OpenTelemetrySettings(url=url, resource=resource, batch=batch)
    if settings.on and settings.mode == "triton" and not settings.file:
        raise ValueError("tracing in triton mode needs a file: --trace-config triton,file=<path>")
    return settings, otel


__all__ = [
    "LEVELS",
    "OpenTelemetrySettings",
    "TraceSettings",
    "apply",
    "parse_trace_config",
    "parse_update",
]
