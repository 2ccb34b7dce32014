"""What scripts/setup.sh has installed into .venv, so that a second run starts at once instead of reinstalling.

    python3 scripts/setup_state.py check EXTRAS    exit 0 when .venv already has modelhost[EXTRAS] for this
                                                   pyproject.toml, 1 when setup must install
    python3 scripts/setup_state.py record EXTRAS   note that modelhost[EXTRAS] is now installed

The package is installed editable, so source changes need no reinstall; only a changed pyproject.toml (its
dependencies) or extras not installed yet do. Extras are compared by what they pull in: `dev` includes `test`,
which includes `torch`, `openvino` and `fil`, so after `scripts/test.sh` the server starts without an install.
Runs on the system Python (3.11+: tomllib), before .venv exists.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tomllib
from pathlib import Path

STATE = Path(".venv") / "modelhost-setup.json"
_SELF_EXTRAS = re.compile(r"^modelhost\[([^\]]*)\]")


def extras_closure(pyproject: dict[str, object], asked: str) -> set[str]:
    """The extras `asked` names (comma-separated), and those they name through `modelhost[...]`, recursively."""
    project = pyproject.get("project", {})
    optional: dict[str, list[str]] = (
        project.get("optional-dependencies", {}) if isinstance(project, dict) else {}
    )
    found: set[str] = set()
    todo = [e.strip() for e in asked.split(",") if e.strip()]
    while todo:
        extra = todo.pop()
        if extra in found:
            continue
        if extra not in optional:
            raise SystemExit(f"setup: pyproject.toml has no extra named '{extra}'")
        found.add(extra)
        for requirement in optional[extra]:
            m = _SELF_EXTRAS.match(requirement)
            if m:
                todo.extend(e.strip() for e in m.group(1).split(",") if e.strip())
    return found


def _digest(root: Path) -> str:
    return hashlib.sha256((root / "pyproject.toml").read_bytes()).hexdigest()


def _recorded(root: Path) -> tuple[str, set[str]]:
    try:
        state = json.loads((root / STATE).read_text())
        return str(state["pyproject"]), set(state["extras"])
    except (OSError, ValueError, KeyError, TypeError):
        return "", set()


def is_installed(root: Path, asked: str) -> bool:
    """True when .venv holds modelhost with every extra `asked` pulls in, installed from this pyproject.toml."""
    if not (root / ".venv" / "bin" / "python").exists():
        return False
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    digest, extras = _recorded(root)
    return digest == _digest(root) and extras_closure(pyproject, asked) <= extras


def record(root: Path, asked: str) -> None:
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    digest, extras = _recorded(root)
    if digest != _digest(root):
        extras = set()  # installed from another pyproject.toml: only what was just installed counts
    extras |= extras_closure(pyproject, asked)
    (root / STATE).write_text(json.dumps({"pyproject": _digest(root), "extras": sorted(extras)}) + "\n")


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or argv[1] not in ("check", "record"):
        print(__doc__, file=sys.stderr)
        return 2
    root = Path.cwd()
    asked = argv[2] if len(argv) == 3 else ""
    if argv[1] == "check":
        return 0 if is_installed(root, asked) else 1
    record(root, asked)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
