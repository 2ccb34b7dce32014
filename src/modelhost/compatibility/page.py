"""docs/compatibility.md, written from the code and modelhost.compatibility.surface.

Regenerate with `modelhost compatibility > docs/compatibility.md`; tests/e2e/test_compatibility.py fails while the
file differs. The flags are passed in (the CLI's table), so that this module does not import the CLI that prints it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import model_config_pb2, service_pb2

from modelhost.backends.registry import supported as served_backends
from modelhost.compatibility.surface import (
    BACKEND_NOTES,
    DELIBERATE_DIFFERENCES,
    EXTENSION_NOTES,
    FEATURES,
    GRPC_HEALTH,
    GRPC_NOT_SERVED,
    HTTP_ENDPOINTS,
    METRIC_CONDITIONS,
    METRIC_NOTES,
    PYTHON_API,
    QA_SUITES_RESULT,
    TRITON_BACKENDS,
    TRITON_EXTENSIONS,
    TRITON_METRIC_FAMILIES,
    Item,
    State,
)
from modelhost.config.validate import FIELDS_NOT_SUPPORTED
from modelhost.engine.engine import EXTENSIONS
from modelhost.frontends.metrics import family_names
from modelhost.options.metrics import MetricsConfig

# Every family a server can export: every latency option on, CPU, GPU and cache families.
EVERY_METRIC = MetricsConfig(counter_latencies=True, histogram_latencies=True, summary_latencies=True)

# Hand notes on ModelConfig fields modelhost serves with a difference worth knowing.
CONFIG_NOTES: dict[str, Item] = {
    "runtime": Item(
        "runtime", State.PARTLY, "PyTorch's `model.py` runtime fails the load", "backends/pytorch.md"
    ),
    "optimization": Item(
        "optimization",
        State.PARTLY,
        "ONNX Runtime and TensorRT settings and execution accelerators as their pages say; the pinned-memory "
        "settings change nothing (no pinned buffers)",
        "configuration.md",
    ),
    "sequence_batching": Item(
        "sequence_batching",
        State.PARTLY,
        "direct, oldest and iterative; not yet: a python model's implicit state (it keeps its own, by "
        "correlation id)",
        "sequence-batching.md",
    ),
    "cc_model_filenames": Item("cc_model_filenames", State.SUPPORTED, "TensorRT", "backends/tensorrt.md"),
    "model_operations": Item(
        "model_operations",
        State.SUPPORTED,
        "ONNX Runtime registers the libraries (as Triton's backend does); another backend fails the load",
        "configuration.md",
        test="tests/e2e/test_custom_ops.py::test_a_model_with_custom_operations_serves_with_their_library",
    ),
    "model_repository_agents": Item(
        "model_repository_agents",
        State.SUPPORTED,
        "Triton's checksum agent, built in (MD5); another agent fails the load with the reason",
        "configuration.md",
        test="tests/e2e/test_checksum_agent.py::test_each_refused_model_fails_with_its_reason_and_the_others_serve",
    ),
}


def grpc_methods() -> list[str]:
    """The methods of inference.GRPCInferenceService, from tritonclient's service descriptor."""
    service = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    return [method.name for method in service.methods]


def backend_items() -> list[tuple[str, str, Item]]:
    """(backend, what it serves, item) for Triton's backends and any other modelhost serves."""
    served = set(served_backends())
    rows = []
    for name, (what, platforms) in TRITON_BACKENDS.items():
        item = BACKEND_NOTES[name]
        described = what + (f" (`{'`, `'.join(platforms.split(', '))}`)" if platforms else "")
        rows.append((name, described, item))
    for name in sorted(served - set(TRITON_BACKENDS)):
        rows.append((name, "a modelhost backend", Item(name, State.SUPPORTED)))
    return rows


def grpc_items() -> list[Item]:
    items = [GRPC_NOT_SERVED.get(name, Item(name, State.SUPPORTED)) for name in grpc_methods()]
    return items + list(GRPC_HEALTH)


def extension_items() -> list[Item]:
    served = set(EXTENSIONS)
    items = []
    for name in TRITON_EXTENSIONS:
        if name in EXTENSION_NOTES:
            items.append(EXTENSION_NOTES[name])
        else:
            items.append(Item(name, State.SUPPORTED if name in served else State.NOT_YET))
    return items


def metric_items() -> list[Item]:
    exported = family_names(EVERY_METRIC, cpu=True, gpu=True, cache=True)
    items = []
    for name in TRITON_METRIC_FAMILIES:
        if name in exported:
            items.append(METRIC_NOTES.get(name, Item(name, State.SUPPORTED, _metric_condition(name))))
        else:
            items.append(METRIC_NOTES.get(name, Item(name, State.NOT_YET)))
    for name in exported:
        if name not in TRITON_METRIC_FAMILIES:
            items.append(Item(name, State.SUPPORTED, "a modelhost addition", "metrics.md"))
    return items


def _metric_condition(name: str) -> str:
    for key, condition in METRIC_CONDITIONS.items():
        if key in name:
            return condition
    return ""


def config_items() -> list[Item]:
    items = []
    for field in model_config_pb2.ModelConfig.DESCRIPTOR.fields:
        if field.name in FIELDS_NOT_SUPPORTED:
            items.append(
                Item(field.name, State.NOT_YET, f"fails the load: {FIELDS_NOT_SUPPORTED[field.name]}")
            )
        else:
            items.append(CONFIG_NOTES.get(field.name, Item(field.name, State.SUPPORTED)))
    for path, why in FIELDS_NOT_SUPPORTED.items():
        if "." in path:
            items.append(Item(path, State.NOT_YET, f"fails the load: {why}", "sequence-batching.md"))
    return items


@dataclass(frozen=True)
class _Table:
    """One section of the page: a table of items, each row its leading cells, then its state and notes."""

    title: str
    intro: str
    columns: tuple[str, ...]  # the leading columns' headings
    rows: list[tuple[tuple[str, ...], Item]]


def _code(items: Iterable[Item]) -> list[tuple[tuple[str, ...], Item]]:
    return [((f"`{item.name}`",), item) for item in items]


def _tables() -> list[_Table]:
    return [
        _Table(
            "Backends",
            "A model of a backend modelhost does not serve is UNAVAILABLE with the reason; the other models serve.",
            ("Backend", "Serves"),
            [((f"`{name}`", what), item) for name, what, item in backend_items()],
        ),
        _Table("HTTP/REST endpoints", "", ("Endpoint",), _code(HTTP_ENDPOINTS)),
        _Table(
            "gRPC methods",
            "`inference.GRPCInferenceService` (every method of Triton's service definition) and the standard health\n"
            "service.",
            ("Method",),
            _code(grpc_items()),
        ),
        _Table(
            "Protocol extensions",
            "As listed by `GET /v2` and `ServerMetadata`, in Triton's order. Triton's provisional `generate`\n"
            "extension is served too (endpoints above).",
            ("Extension",),
            _code(extension_items()),
        ),
        _Table("Metric families", "", ("Family",), _code(metric_items())),
        _Table(
            "Model configuration",
            "Every field of `ModelConfig` (`config.pbtxt`). A field modelhost does not act on fails the model's load\n"
            "with a message naming it, rather than loading as if it were honoured.",
            ("Field",),
            _code(config_items()),
        ),
        _Table(
            "Python backend API",
            "",
            ("`triton_python_backend_utils`",),
            [((item.name,), item) for item, _ in PYTHON_API],
        ),
        _Table("Features and integrations", "", ("Feature",), [((item.name,), item) for item in FEATURES]),
    ]


# The flag groups come after this many tables (the protocol's sections), before the metric families.
_FLAGS_AFTER = 4


def markdown(flags: Sequence[Any], sections: Sequence[str]) -> str:
    """The page; `flags` and `sections` are the CLI's table (modelhost.cli.flags.FLAGS, SECTIONS)."""
    tables = _tables()
    out = [
        "# Compatibility with Triton Inference Server",
        "",
        "What of Triton Inference Server 2.51 modelhost serves, item by item: **supported**, **partly** (what is",
        "missing is said), **written, not yet run on a GPU** (code and tests that need a GPU, which",
        "`scripts/gpu_check.sh` runs on one; without a GPU the item answers as its note says), **not yet**, or",
        "**not planned** (and why). This page is written from the code",
        "(`modelhost compatibility > docs/compatibility.md`) and `tests/e2e/test_compatibility.py` checks it",
        "against a running server: every endpoint and gRPC method is called, and the flags, extensions, metric",
        "families, config fields and python backend names are compared with what the code has. Where modelhost",
        "answers differently on purpose (a clear 4xx where Triton answers 500, ...), the feature's page says so.",
        "",
        _counts([item for table in tables for _, item in table.rows]),
    ]
    for i, table in enumerate(tables):
        if i == _FLAGS_AFTER:
            out += _flag_section(flags, sections)
        out += ["", f"## {table.title}", ""] + ([table.intro, ""] if table.intro else [])
        out.append("| " + " | ".join((*table.columns, "State", "Notes")) + " |")
        out.append("|" + "---|" * (len(table.columns) + 2))
        out += ["| " + " | ".join((*cells, _state(item), _note(item))) + " |" for cells, item in table.rows]
    out += [
        "",
        "## Triton's own test suites",
        "",
        f"{QA_SUITES_RESULT}. `scripts/triton_qa.py` runs Triton's qa suites (`qa/L0_*` of its repository at",
        "v2.51.0) against modelhost, on the CPU, as each suite's `test.sh` runs them against tritonserver; how to run",
        "it, the suites, and each test that fails with its reason: [triton-qa.md](triton-qa.md). To run them:",
        "",
        "```sh",
        "git clone --depth 1 --branch v2.51.0 https://github.com/triton-inference-server/server /tmp/triton",
        ".venv/bin/python scripts/triton_qa.py --triton /tmp/triton --out /tmp/triton-qa   # summary.md there",
        "```",
        "",
        "## Differences on purpose",
        "",
        *(f"- {difference}" for difference in DELIBERATE_DIFFERENCES),
    ]
    return "\n".join(out) + "\n"


def _flag_section(flags: Sequence[Any], sections: Sequence[str]) -> list[str]:
    out = [
        "",
        "## tritonserver flags",
        "",
        "Every tritonserver flag is known. **Honoured** flags do what they do in tritonserver; **ignored** ones",
        "have no meaning in modelhost's design and are accepted and logged; **not yet** ones stop the command",
        "with the reason. Every flag, with its meaning: [cli.md](cli.md).",
        "",
        "| Group | Honoured | Ignored | Not yet |",
        "|---|---|---|---|",
    ]
    for section in sections:
        group = [f for f in flags if f.section == section]
        honoured = sum(1 for f in group if f.status.name == "HONOURED")
        ignored = [f"`--{f.name}`" for f in group if f.status.name == "IGNORED"]
        refused = [f"`--{f.name}`" for f in group if f.status.name == "REFUSED"]
        out.append(f"| {section} | {honoured} | {_listing(ignored)} | {_listing(refused)} |")
    return out


def _listing(names: Iterable[str]) -> str:
    names = list(names)
    return ", ".join(names) if names else "—"


def _counts(items: list[Item]) -> str:
    by_state = {state: sum(1 for i in items if i.state is state) for state in State}
    return "Items on this page: " + ", ".join(f"{count} {state}" for state, count in by_state.items()) + "."


def _state(item: Item) -> str:
    return f"**{item.state}**" if item.state is State.SUPPORTED else str(item.state)


def _note(item: Item) -> str:
    note = item.note.replace("|", "\\|")
    if item.doc:
        note += ("; " if note else "") + f"[{item.doc}]({item.doc})"
    return note


__all__ = [
    "EVERY_METRIC",
    "backend_items",
    "config_items",
    "extension_items",
    "grpc_items",
    "grpc_methods",
    "markdown",
    "metric_items",
]
