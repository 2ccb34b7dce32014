"""The cluster's statistics and metrics: every replica's, summed per model version, as one server would count
them.

A Ray Serve call reaches one replica, so the ingress cannot ask each. Instead every replica reports its engine's
statistics (Triton's statistics JSON) to one named actor, `StatisticsCollector`, every
`replica.REPORT_INTERVAL_S`; the ingress reads the collector and sums. A replica that stops (scaled in, updated,
killed) keeps its last report in the sums, so counts never go back; deleting a deployment (unloading its models)
forgets its replicas. The `/metrics` page is summed the same way: each replica reports its own page (the nv_*
families of its models) and the ingress adds up the samples of each series (`merge_metrics`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, NamedTuple


class Report(NamedTuple):
    rows: list[dict[str, Any]]  # Triton's statistics JSON, a row per model version
    page: str  # the replica's /metrics page
    replica: str = ""
    deployment: str = ""
    link: str = ""  # where the replica's engine link listens ("": a replica that stopped)
    models: tuple[str, ...] = ()  # the models it holds (a multiplexed replica: those loaded now)


# A replica silent this long is taken as gone: its last report moves to the retired sums.
SILENT_AFTER_S = 10.0


class StatisticsCollector:
    """A Ray actor (named, one per cluster ingress) holding each replica's last statistics."""

    def __init__(self) -> None:
        # replica id -> (deployment, when reported, report)
        self._live: dict[str, tuple[str, float, Report]] = {}
        # deployment -> reports of replicas that stopped
        self._retired: dict[str, list[Report]] = {}

    def report(
        self,
        replica: str,
        deployment: str,
        rows: list[dict[str, Any]],
        page: str,
        link: str,
        models: tuple[str, ...],
        final: bool,
    ) -> None:
        """A replica's statistics rows, /metrics page, link address and the models it holds (`final`: its last,
        as it stops)."""
        report = Report(rows, page, replica, deployment, link, tuple(models))
        if final:
            self._live.pop(replica, None)
            self._retired.setdefault(deployment, []).append(report)
        else:
            self._live[replica] = (deployment, time.monotonic(), report)

    def forget(self, deployment: str) -> None:
        """The deployment was deleted: its counts go with it (as an unloaded model's do)."""
        self._retired.pop(deployment, None)
        for replica in [r for r, (d, _, _) in self._live.items() if d == deployment]:
            del self._live[replica]

    def reports(self) -> list[Report]:
        """Every replica's last report, live and retired."""
        self._retire_silent()
        return [report for _, _, report in self._live.values()] + [
            report._replace(link="") for retired in self._retired.values() for report in retired
        ]

    def links(self) -> list[Report]:
        """The live replicas' reports that give a link, without their statistics and metrics page (what routing
        needs, asked for every second by each router)."""
        self._retire_silent()
        return [report._replace(rows=[], page="") for _, _, report in self._live.values() if report.link]

    def _retire_silent(self) -> None:
        now = time.monotonic()
        for replica, (deployment, when, report) in list(self._live.items()):
            if now - when > SILENT_AFTER_S:
                del self._live[replica]
                self._retired.setdefault(deployment, []).append(report)


def merge(replica_rows: Iterable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The statistics rows of several replicas as one: per (name, version), counts and durations summed, the
    last inference the latest, batch sizes and latency buckets summed by key, memory summed by device."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for rows in replica_rows:
        for row in rows:
            key = (str(row.get("name", "")), str(row.get("version", "")))
            merged[key] = _add(merged[key], row) if key in merged else _copy(row)
    return [merged[key] for key in sorted(merged)]


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _add(total: Any, more: Any, key: str = "") -> Any:
    if isinstance(total, dict) and isinstance(more, dict):
        out = dict(total)
        for k, v in more.items():
            out[k] = _add(out[k], v, k) if k in out else _copy(v)
        return out
    if isinstance(total, list) and isinstance(more, list):
        return _add_list(total, more, key)
    if isinstance(total, bool) or isinstance(more, bool):
        return total
    if isinstance(total, int | float) and isinstance(more, int | float):
        return max(total, more) if key == "last_inference" else total + more
    return total  # names, versions, units: the same in every replica


def _add_list(total: list[Any], more: list[Any], key: str) -> list[Any]:
    if key == "buckets":  # latency_histogram: [upper bound, count] pairs
        counts: dict[Any, Any] = {}
        for bound, count in [*total, *more]:
            counts[bound] = counts.get(bound, 0) + count
        return [[bound, counts[bound]] for bound in sorted(counts)]

    def ident(item: Any) -> Any:
        if not isinstance(item, dict):
            return id(item)
        if "batch_size" in item:
            return item["batch_size"]
        return (item.get("type"), item.get("id"))

    by_key: dict[Any, Any] = {ident(item): item for item in total}
    for item in more:
        k = ident(item)
        by_key[k] = _add(by_key[k], item) if k in by_key else _copy(item)
    return (
        sorted(by_key.values(), key=lambda item: str(ident(item)))
        if key == "memory_usage"
        else _by_batch(by_key)
    )


def _by_batch(by_key: dict[Any, Any]) -> list[Any]:
    try:
        return [by_key[k] for k in sorted(by_key)]
    except TypeError:
        return list(by_key.values())


def merge_metrics(pages: Iterable[str]) -> str:
    """Prometheus pages of several replicas as one: each series' samples summed (counters, and gauges such as
    pending requests or memory, which add up over replicas), families in the order first seen. Summary quantiles
    cannot be summed and are left out (their _sum and _count are kept)."""
    headers: dict[str, list[str]] = {}
    samples: dict[str, dict[str, float]] = {}
    for page in pages:
        for line in page.splitlines():
            if not line.strip():
                continue
            if line.startswith("#"):
                parts = line.split(" ", 3)
                if len(parts) >= 3:
                    family = parts[2]
                    kept = headers.setdefault(family, [])
                    if line not in kept:
                        kept.append(line)
                    samples.setdefault(family, {})
                continue
            series, _, value = line.rpartition(" ")
            if 'quantile="' in series:
                continue
            family = _family(series, headers)
            try:
                number = float(value)
            except ValueError:
                continue
            kept_samples = samples.setdefault(family, {})
            kept_samples[series] = kept_samples.get(series, 0.0) + number
    lines: list[str] = []
    for family, summed in samples.items():
        lines.extend(headers.get(family, []))
        lines.extend(f"{name} {_number(value)}" for name, value in summed.items())
    return "\n".join(lines) + "\n" if lines else ""


def _family(series: str, headers: dict[str, list[str]]) -> str:
    name = series.split("{", 1)[0]
    for suffix in ("_count", "_sum", "_bucket"):
        if name.endswith(suffix) and name.removesuffix(suffix) in headers:
            return name.removesuffix(suffix)
    return name


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)
