"""A live progress line on a terminal (stderr), and `-v`'s line per measurement window."""

from __future__ import annotations

import sys

from modelhost.perf.measure import Window
from modelhost.perf.options import PerfOptions


class Progress:
    def __init__(self, options: PerfOptions) -> None:
        self.options = options
        self.live = options.progress if options.progress is not None else sys.stderr.isatty()
        self.shown = False

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
        elif self.live:
            sys.stderr.write("\r\033[K" + text)
            sys.stderr.flush()
            self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.shown = False
