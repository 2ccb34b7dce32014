"""A stand-in for the server that `modelhost serve` runs."""

from __future__ import annotations

import sys
import types

import pytest

from modelhost.options import ServerOptions


class FakeApp:
    """Stands in for modelhost.app: records the options run_server was given."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, code: int = 0) -> None:
        self.calls: list[ServerOptions] = []
        self.code = code
        module = types.ModuleType("modelhost.app")
        module.run_server = self.run_server  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "modelhost.app", module)

    def run_server(self, options: ServerOptions) -> int:
        self.calls.append(options)
        return self.code
