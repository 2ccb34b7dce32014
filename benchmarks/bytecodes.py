"""Python bytecodes run, by function: a measure of a code path's cost that does not move with the machine's
speed or load (sys.settrace with opcode events). It leaves out what C code costs (numpy, the kernel), so a change
is judged on timings too. Used by inprocess_load.py and stub_exchange.py."""

from __future__ import annotations

import collections
import sys
from types import FrameType
from typing import Any


class BytecodeCount:
    """`with count:` counts the bytecodes the current thread runs meanwhile, by function."""

    def __init__(self) -> None:
        self.by_function: collections.Counter[str] = collections.Counter()

    def _on_call(self, frame: FrameType, event: str, arg: object) -> Any:
        frame.f_trace_opcodes = True
        return self._on_opcode

    def _on_opcode(self, frame: FrameType, event: str, arg: object) -> Any:
        if event == "opcode":
            code = frame.f_code
            self.by_function[
                f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}:{code.co_firstlineno}"
            ] += 1
        return self._on_opcode

    def __enter__(self) -> BytecodeCount:
        sys.settrace(self._on_call)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(None)

    def report(self, per: int, top: int) -> str:
        """The total per `per` (requests), then the `top` functions that ran most."""
        lines = [f"{sum(self.by_function.values()) / per:.0f} bytecodes per request"]
        lines += [f"  {count / per:7.1f}  {name}" for name, count in self.by_function.most_common(top)]
        return "\n".join(lines)
