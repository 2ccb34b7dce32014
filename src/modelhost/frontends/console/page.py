"""The console's page, rendered on the server from what the engine says: the server's facts and every model as a
table, each loaded model's configuration as `config.pbtxt` text and the commands that measure and tune it.

Read without JavaScript this is the whole console (a readable table); with it, console.js takes the same
elements over and keeps them current through the API.
"""

from __future__ import annotations

import asyncio
import html
import os
import time
from dataclasses import dataclass
from typing import Any

import orjson
from google.protobuf import text_format  # type: ignore[import-untyped]
from tritonclient.grpc.model_config_pb2 import ModelInstanceGroup

from modelhost.engine_api import EngineAPI
from modelhost.errors import ModelhostError
from modelhost.frontends.console.settings import ConsoleSettings
from modelhost.host.devices import cpu_count
from modelhost.host.process_tree import tree_usage
from modelhost.repository.mirror import human_size

# The model table's columns, in order: (key in console.js, heading).
COLUMNS = (
    ("name", "Model"),
    ("version", "Version"),
    ("state", "State"),
    ("reason", "Reason"),
    ("backend", "Backend"),
    ("instances", "Instances"),
    ("max_batch_size", "Max batch"),
    ("batching", "Batching"),
    ("memory", "Memory"),
    ("requests", "Requests"),
    ("failures", "Failures"),
)


@dataclass(frozen=True, slots=True)
class ModelRow:
    cells: dict[str, str]
    pbtxt: str  # "" when the version is not loaded
    evicted: str  # when and why the server unloaded it on its own ("" if it did not)
    memory_bytes: int  # what the loaded version takes (0 unless loaded under a memory budget)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def describe(config: Any) -> dict[str, str]:
    """A loaded version's backend, instances and batching, from its configuration in force."""
    kinds = {"KIND_GPU": "GPU", "KIND_CPU": "CPU"}  # console.js's describe() says the same
    instances = ", ".join(
        f"{g.count} x {g.name} ({kinds.get(ModelInstanceGroup.Kind.Name(g.kind), 'model')})"
        for g in config.instance_group
    )
    batching = "none"
    if config.HasField("dynamic_batching"):
        dynamic = config.dynamic_batching
        preferred = "/".join(str(n) for n in dynamic.preferred_batch_size)
        batching = f"dynamic, delay {dynamic.max_queue_delay_microseconds} us" + (
            f", preferred {preferred}" if preferred else ""
        )
    elif config.HasField("sequence_batching"):
        batching = "sequence"
    elif config.HasField("ensemble_scheduling"):
        batching = "ensemble"
    return {
        "backend": config.backend or config.platform,
        "instances": instances,
        "max_batch_size": str(config.max_batch_size),
        "batching": batching,
    }


def _counts(stats: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[int, int]]:
    counts = {}
    for s in stats:
        inference = s.get("inference_stats", {})
        counts[(s["name"], s["version"])] = (
            int(inference.get("success", {}).get("count", 0)),
            int(inference.get("fail", {}).get("count", 0)),
        )
    return counts


async def model_rows(engine: EngineAPI, refused: dict[str, str]) -> list[ModelRow]:
    """Every row of the repository index, with what the loaded versions' configuration and statistics say;
    nothing of a category in `refused` (--http-restricted-api: the request may not read it through the API)."""
    if "model-repository" in refused:
        return []
    index = await engine.repository_index()
    counts = {} if "statistics" in refused else _counts(await engine.statistics())
    rows = []
    for row in index:
        name, version = str(row["name"]), str(row.get("version", ""))
        cells = dict.fromkeys((key for key, _ in COLUMNS), "")
        cells.update(name=name, version=version, state=str(row.get("state", "")))
        cells["reason"] = str(row.get("reason", ""))
        if "memory_bytes" in row:
            cells["memory"] = human_size(int(row["memory_bytes"]))
        pbtxt = ""
        if row.get("state") == "READY" and "model-config" not in refused:
            try:
                config = await engine.model_config(name, version)
            except ModelhostError:
                config = None  # unloaded since the index was read
            if config is not None:
                cells.update(describe(config))
                pbtxt = text_format.MessageToString(config)
        if row.get("state") == "READY" and "statistics" not in refused:
            success, fail = counts.get((name, version), (0, 0))
            cells.update(requests=str(success), failures=str(fail))
        memory = int(row.get("memory_bytes", 0))
        rows.append(ModelRow(cells, pbtxt, str(row.get("evicted", "")), memory))
    return rows


def _readiness(ready: bool | None) -> str:
    """None: the request may not read the health API (--http-restricted-api)."""
    return "restricted" if ready is None else "ready" if ready else "not ready"


def _uptime_text(seconds: float) -> str:
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    return (f"{days}d " if days else "") + f"{hours:02d}:{minutes:02d}:{s:02d}"


async def server_facts(
    engine: EngineAPI, settings: ConsoleSettings, refused: dict[str, str]
) -> dict[str, Any]:
    """What the server panel shows, as plain data (also handed to console.js); the server's metadata and
    readiness only where the request may read them through the API."""
    metadata = {} if "metadata" in refused else await engine.server_metadata()
    ready = None if "health" in refused else await engine.is_ready()
    import psutil

    usage = await asyncio.to_thread(tree_usage, settings.engine_pid or os.getpid())
    started, rss, cpu_s = (
        (usage.started, usage.rss_bytes, usage.cpu_seconds) if usage else (time.time(), 0, 0.0)
    )
    memory = psutil.virtual_memory()
    return {
        "name": metadata.get("name", ""),
        "version": metadata.get("version", ""),
        "extensions": list(metadata.get("extensions", [])),
        "ready": ready,
        "started": started,
        "ports": dict(settings.ports),
        "frontend_processes": settings.frontend_processes,
        "model_control_mode": settings.model_control_mode,
        "memory_budget": settings.memory_budget,
        "rss_bytes": rss,
        "cpu_seconds": round(cpu_s, 2),
        "cores": cpu_count(),  # what the server may use (affinity, a container's quota), as the load is read
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "machine_memory": [memory.total - memory.available, memory.total],
    }


def _server_panel(facts: dict[str, Any], rows: list[ModelRow]) -> str:
    ports = ", ".join(f"{k} {v}" for k, v in facts["ports"].items()) or "none"
    used, total = facts["machine_memory"]
    items = [
        ("Server", f"{facts['name']} {facts['version']}"),
        ("Readiness", _readiness(facts["ready"])),
        ("Uptime", _uptime_text(time.time() - facts["started"])),
        ("Ports", ports),
        (
            "Frontend processes",
            str(facts["frontend_processes"] or "none (the engine serves every protocol)"),
        ),
        ("Model control", facts["model_control_mode"]),
        (
            "CPU",
            f"load {facts['load_average'][0]:g} on {facts['cores']} cores; "
            f"the server's processes used {facts['cpu_seconds']:g} s",
        ),
        (
            "Memory",
            f"the server's processes {human_size(facts['rss_bytes'])} resident; "
            f"machine {human_size(used)} of {human_size(total)} in use",
        ),
        ("Extensions", " ".join(facts["extensions"])),
    ]
    budget = facts["memory_budget"]
    if budget is not None:
        taken = sum(r.memory_bytes for r in rows)
        items.append(
            ("Memory budget", f"{human_size(taken)} of {human_size(budget)} taken by the loaded models")
        )
    evicted = [r for r in rows if r.evicted]
    body = "".join(
        f'<dt>{_e(k)}</dt><dd id="server-{_e(k.lower().replace(" ", "-"))}">{_e(v)}</dd>' for k, v in items
    )
    out = f'<dl class="facts">{body}</dl>'
    # Always there: --model-idle-unload-secs evicts without a budget too.
    lately = "".join(f"<li>{_e(r.cells['name'])}: {_e(r.evicted)}</li>" for r in evicted)
    out += f'<h3>Evicted lately</h3><ul id="evicted">{lately or "<li>none</li>"}</ul>'
    return out


def _table(rows: list[ModelRow]) -> str:
    head = "".join(f'<th data-key="{key}" scope="col">{_e(title)}</th>' for key, title in COLUMNS)
    body = "".join(
        "<tr>" + "".join(f'<td data-key="{key}">{_e(r.cells[key])}</td>' for key, _ in COLUMNS) + "</tr>"
        for r in rows
    )
    return f'<table id="models-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def commands(name: str, host: str) -> tuple[str, str]:
    """The `modelhost perf` and `modelhost tune` command lines that measure and tune `name` on this server."""
    perf = f"modelhost perf -m {name} -u {host} --concurrency-range 1:8:2"
    tune = f"modelhost tune -m {name} --url {host} --latency-budget-ms 10"
    return perf, tune


def _configs(rows: list[ModelRow], host: str) -> str:
    parts = []
    for r in rows:
        if not r.pbtxt:
            continue
        perf, tune = commands(r.cells["name"], host)
        parts.append(
            f'<details class="model-config" data-model="{_e(r.cells["name"])}">'
            f"<summary>{_e(r.cells['name'])} version {_e(r.cells['version'])}</summary>"
            f"<h4>config.pbtxt (in force)</h4><pre>{_e(r.pbtxt)}</pre>"
            f"<h4>Measure and tune</h4><pre>{_e(perf)}\n{_e(tune)}</pre></details>"
        )
    return "".join(parts)


def _json_for_script(doc: object) -> str:
    # "</" cannot end the script element it sits in.
    return orjson.dumps(doc).decode().replace("</", "<\\/")


def _refusals(refused: dict[str, str]) -> str:
    if not refused:
        return ""
    items = "".join(f"<li>{_e(category)}: {_e(why)}</li>" for category, why in refused.items())
    note = "Left out: these APIs are restricted (--http-restricted-api)."
    return f'<div id="restricted"><p>{note}</p><ul>{items}</ul></div>'


async def render(engine: EngineAPI, settings: ConsoleSettings, host: str, refused: dict[str, str]) -> str:
    """The console page; `host` is the Host header the browser sent (the address in the command lines);
    `refused`: the API categories this request may not read, and why (left out of the page)."""
    facts = await server_facts(engine, settings, refused)
    rows = await model_rows(engine, refused)
    ready_class = "ready" if facts["ready"] else "not-ready"
    readiness = _readiness(facts["ready"])
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>modelhost console</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="console/assets/uPlot.min.css">
<link rel="stylesheet" href="console/assets/console.css">
</head>
<body>
<header>
<h1>modelhost</h1>
<span id="readiness" class="{ready_class}">{readiness}</span>
<nav><a href="console/compatibility">Compatibility</a> <a href="v2">Server metadata (JSON)</a></nav>
</header>
<main>
{_refusals(refused)}
<section id="server"><h2>Server</h2>{_server_panel(facts, rows)}</section>
<section id="models">
<h2>Models</h2>
<div id="model-tools" hidden>
<label>Filter <input id="filter" type="search" placeholder="name, state or backend"></label>
<span id="action-message" role="status"></span>
</div>
{_table(rows)}
</section>
<section id="detail" hidden></section>
<section id="configs"><h2>Configurations</h2>{_configs(rows, host)}</section>
</main>
<script type="application/json" id="console-facts">{_json_for_script(facts)}</script>
<script src="console/assets/uPlot.iife.min.js"></script>
<script src="console/assets/console.js"></script>
</body>
</html>
"""
