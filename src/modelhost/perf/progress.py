"""A live progress line on a terminal (stderr), and `-v`'s line per measurement window."""

from __future__ import annotations

import sys

from modelhost.perf.measure import Window
from modelhost.perf.options import PerfOptions


class LiveLine:
    """One line on stderr, rewritten in place (a terminal's carriage return and erase-line); `clear()` before
    printing anything else. Off (every call a no-op) where `live` is False, or None and stderr is no terminal."""

    def __init__(self, live: bool | None) -> None:
        self.live = live if live is not None else sys.stderr.isatty()
        self.shown = False

    def show(self, text: str) -> None:
        if self.live:
            sys.stderr.write("\r\033[K" + text)
            sys.stderr.flush()
            self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.shown = False


class Progress:
    def __init__(self, options: PerfOptions) -> None:
        self.options = options
        self.line = LiveLine(options.progress)

    def window(self, value: float, trial: int, window: Window, latency_ns: float) -> None:
        o = self.options
        name = "concurrency" if o.is_concurrency else "request rate"
        which = "avg" if o.percentile < 0 else f"p{o.percentile}"
        text = (
            f"  {name} {value:g}, window {trial}/{o.max_trials}: {window.throughput(o.batch_size):.1f} infer/sec, "
            f"{which} latency {latency_ns / 1e3:.0f} usec"
        )
        if o.verbose:
            self.clear()
            print(text, flush=True)
        else:
            self.line.show(text)

    def clear(self) -> None:
        self.line.clear()
