"""What a run shows while it runs: on a terminal a live line with the point being measured, the best so far and
the ETA; otherwise (a log, CI) one plain line per point."""

from __future__ import annotations

import time

from modelhost.perf.measure import Window
from modelhost.perf.progress import LiveLine
from modelhost.tune.checkpoint import VariantRecord
from modelhost.tune.goal import Goal
from modelhost.tune.point import Point

LIVE_WIDTH = 160  # a longer live line would wrap, and \r would then rewrite only its last row


def clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    def __init__(
        self, goal: Goal, started: float, deadline: float, live: bool | None, thread_parameter: str | None
    ) -> None:
        self.goal = goal
        self.started = started
        self.deadline = deadline
        self.live_line = LiveLine(live)
        self.thread_parameter = thread_parameter
        self.best: Point | None = None
        self.best_name = ""
        self.measuring = ""
        self.point_seconds: list[float] = []
        self.expected_variants: int | None = None  # known for a brute search: the ETA counts them down
        self.done_points = 0
        self.variants_seen: set[str] = set()

    def eta(self) -> float:
        """Seconds left: the time limit's, or less where the remaining points are known."""
        left = self.deadline - time.monotonic()
        if self.expected_variants is not None and self.point_seconds and self.variants_seen:
            # points per variant so far (a concurrency sweep's length varies by model) times what is left
            per_variant = self.done_points / len(self.variants_seen)
            points_left = max(0.0, self.expected_variants * per_variant - self.done_points)
            left = min(left, points_left * sum(self.point_seconds) / len(self.point_seconds))
        return max(0.0, left)

    def _status(self) -> str:
        best = ""
        if self.best is not None:
            best = f" | best {self.best_name}: {self.best.throughput:.0f} infer/sec, p99 {self.best.p99_ms:.2f} ms"
        return f"[{clock(time.monotonic() - self.started)} ETA {clock(self.eta())}]{best}"

    def _live(self, text: str) -> None:
        self.live_line.show(text[:LIVE_WIDTH])

    def clear(self) -> None:
        self.live_line.clear()

    def line(self, text: str) -> None:
        self.clear()
        print(text, flush=True)

    def starting(self, record: VariantRecord, concurrency: int) -> None:
        self.measuring = f"{record.name} c={concurrency}"
        self._live(f"{self._status()} measuring {self.measuring}")

    def window(self, value: float, trial: int, window: Window, latency_ns: float) -> None:
        self._live(
            f"{self._status()} {self.measuring} window {trial}: {window.throughput(1):.0f} infer/sec, "
            f"avg {latency_ns / 1e6:.2f} ms"
        )

    # session.Reporter
    def measured(self, record: VariantRecord, point: Point, cached: bool) -> None:
        self.done_points += 1
        self.variants_seen.add(record.variant.key)
        if not cached:
            self.point_seconds.append(point.seconds)
        if self.goal.satisfies(point) and (
            self.best is None or self.goal.rank_key(point) > self.goal.rank_key(self.best)
        ):
            self.best, self.best_name = point, record.name
        where = "from the checkpoint" if cached else ""
        mark = "" if self.goal.satisfies(point) else " (outside the constraints)"
        self.line(
            f"[{clock(time.monotonic() - self.started)}] {record.name} "
            f"({record.variant.describe(self.thread_parameter)}) concurrency {point.concurrency}: "
            f"{point.throughput:.1f} infer/sec, p99 {point.p99_ms:.2f} ms{mark} {where}".rstrip()
        )

    def failed(self, record: VariantRecord, concurrency: int | None) -> None:
        self.done_points += 1
        self.variants_seen.add(record.variant.key)
        if concurrency is None:
            what = record.variant.describe(self.thread_parameter)
            self.line(
                f"[{clock(time.monotonic() - self.started)}] {record.name} ({what}) failed: {record.failure}"
            )
        else:
            self.line(
                f"[{clock(time.monotonic() - self.started)}] {record.name} concurrency {concurrency}: requests failed: "
                f"{record.errors[concurrency]}"
            )
