"""The package layout: no module imports, even lazily inside a function or only for type checking, a module that
imports it back; no module imports one of a higher floor (FLOORS); the frontends meet the engine only at
`modelhost.engine_api`, and the transport knows no frontend; no module is over 500 lines but declarative tables.

Lazy and type-only imports count: a cycle through one is still a cycle in the design (a backend seam that names
its implementations, config code that calls a backend).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "src" / "modelhost"


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(("modelhost", *path.relative_to(PACKAGE).with_suffix("").parts))
        modules[name.removesuffix(".__init__")] = path
    return modules


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph[module]:
            if other not in graph:
                continue
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    return found


def test_no_import_cycles() -> None:
    modules = _modules()
    graph = {name: _all_imports(path, modules) - {name} for name, path in modules.items()}
    assert _cycles(graph) == []


# Backend packages under backends/ (each one backend) and the contract modules beside them.
_BACKEND_PACKAGES = {p.name for p in (PACKAGE / "backends").iterdir() if (p / "__init__.py").is_file()}
# The one reach into a backend from outside: client shared-memory registration refuses the region prefix the
# python backend names its own regions with, which that backend's settings define.
_ALLOWED_REACH = {("modelhost.app", "modelhost.backends.python.process")}


def test_backends_are_reached_only_through_the_registry() -> None:
    """Adding a backend touches its own package and the registry's table, nothing else: no module outside a
    backend package imports it (the registry names them as strings), and no backend imports another."""
    modules = _modules()
    reaches = []
    for name, path in modules.items():
        for imported in _all_imports(path, modules):
            parts = imported.split(".")
            if len(parts) < 3 or parts[1] != "backends" or parts[2] not in _BACKEND_PACKAGES:
                continue
            own = name.split(".")[2] if name.startswith("modelhost.backends.") else None
            if own != parts[2] and (name, imported) not in _ALLOWED_REACH:
                reaches.append(f"{name} imports {imported}")
    assert reaches == []
    assert {"onnxruntime", "python"} <= _BACKEND_PACKAGES


def _all_imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Every modelhost module a file imports, type-only and lazy imports included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("modelhost"):
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in modules else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("modelhost")}
    return found


# What holds model state: a frontend reaches it only through modelhost.engine_api.EngineAPI. Derived from the
# tree, so that a new module of the engine is covered the day it is added.
def _engine_state() -> tuple[str, ...]:
    under = ("modelhost.engine.", "modelhost.backends.", "modelhost.observability.tracing.")
    return tuple(sorted(name for name in _modules() if name.startswith(under) or name + "." in under))


def _offending(prefix: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    modules = _modules()
    offending: dict[str, list[str]] = {}
    for name, path in modules.items():
        if name == prefix or name.startswith(prefix + "."):
            below = tuple(f + "." for f in forbidden)
            bad = sorted(m for m in _all_imports(path, modules) if m in forbidden or m.startswith(below))
            if bad:
                offending[name] = bad
    return offending


def test_frontends_meet_the_engine_only_at_the_engine_api() -> None:
    engine = _engine_state()
    assert {"modelhost.engine.engine", "modelhost.engine.registry.registry", "modelhost.backends.api"} <= set(engine)
    assert _offending("modelhost.frontends", engine) == {}


def test_the_transport_imports_no_frontend() -> None:
    assert _offending("modelhost.transport", ("modelhost.frontends",)) == {}


def test_backends_stand_below_the_engine() -> None:
    """Backends reach the engine through `backends.api.EngineHandle` only: none imports anything of `engine/`."""
    assert _offending("modelhost.backends", ("modelhost.engine",)) == {}


# The import floors, lowest first: a module imports modules of its own floor and of those below, never above.
# Frontends and the engine stand on one floor as peers (the rules above keep them apart); the options layer takes
# the command line and makes the small settings every part above it is built from.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("modelhost", "modelhost.errors", "modelhost.datatypes", "modelhost.types", "modelhost.io_specs",
     "modelhost.tensor_codec"),
    ("modelhost.host", "modelhost.repository"),
    ("modelhost.options",),
    ("modelhost.observability", "modelhost.config", "modelhost.engine_api"),
    ("modelhost.backends",),
    ("modelhost.engine", "modelhost.transport", "modelhost.frontends"),
    ("modelhost.supervisor", "modelhost.app", "modelhost.in_process"),
    ("modelhost.cluster", "modelhost.cli", "modelhost.perf", "modelhost.tune", "modelhost.compatibility",
     "modelhost.__main__", "modelhost.examples"),
)  # fmt: skip


def _floor(module: str) -> int | None:
    """The floor of the longest package or module of FLOORS that `module` is or lies in."""
    found: tuple[int, int] | None = None
    for number, floor in enumerate(FLOORS):
        for package in floor:
            # The root package ("modelhost") is a floor of its own module only, not a prefix of every module.
            inside = module.startswith(package + ".") and package != "modelhost"
            if (module == package or inside) and (
                found is None or len(package) > found[1]
            ):
                found = (number, len(package))
    return None if found is None else found[0]


def test_every_module_stands_on_a_floor() -> None:
    assert [name for name in _modules() if _floor(name) is None] == []


def test_no_module_imports_a_higher_floor() -> None:
    modules = _modules()
    upward = []
    for name, path in modules.items():
        own = _floor(name)
        assert own is not None
        for imported in _all_imports(path, modules):
            floor = _floor(imported)
            if floor is not None and floor > own:
                upward.append(f"{name} (floor {own}) imports {imported} (floor {floor})")
    assert upward == []


# Modules that are declarative tables, whose length is their content.
_TABLES = {"modelhost.compatibility.surface"}


def test_no_module_is_over_500_lines_but_tables() -> None:
    long = {
        name: lines
        for name, path in _modules().items()
        if (lines := len(path.read_text().splitlines())) > 500 and name not in _TABLES
    }
    assert long == {}
