"""What "best" means for a run: the constraints a point must meet and the objective that ranks those that do
(Model Analyzer's `latency_budget`, `min_throughput` and objectives), and the Pareto front of throughput
against p99 latency."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from modelhost.tune.point import Point
from modelhost.tune.prices import cost_per_million

# A step of the quick search must beat the current configuration by this much: measurements vary by a few
# percent from one to the next, and a move on noise wastes the time limit.
MIN_GAIN = 0.02


@dataclass(frozen=True, slots=True)
class Goal:
    objective: str = "throughput"  # throughput | latency | cost
    latency_budget_ms: float | None = None
    min_throughput: float | None = None
    price_per_hour: float | None = None

    def satisfies(self, point: Point) -> bool:
        if self.latency_budget_ms is not None and point.p99_ms > self.latency_budget_ms:
            return False
        return self.min_throughput is None or point.throughput >= self.min_throughput

    def cost(self, point: Point) -> float | None:
        if self.price_per_hour is None:
            return None
        return cost_per_million(self.price_per_hour, point.throughput)

    def value(self, point: Point) -> float:
        """Larger is better: throughput; the negated p99; the negated cost per million inferences. On one
        host the price is the same for every point, so cost ranks as throughput does, in dollars."""
        if self.objective == "latency":
            return -point.p99_ms
        if self.objective == "cost":
            cost = self.cost(point)
            return -cost if cost is not None else float("-inf")
        return point.throughput

    def rank_key(self, point: Point) -> tuple[float, float]:
        tie = point.throughput if self.objective == "latency" else -point.p99_ms
        return self.value(point), tie

    def best(self, points: Iterable[Point]) -> Point | None:
        """The best point that meets the constraints, or None."""
        feasible = [p for p in points if self.satisfies(p)]
        return max(feasible, key=self.rank_key) if feasible else None

    def closest(self, points: Iterable[Point]) -> Point | None:
        """With no point meeting the constraints: the one that misses them least (lowest p99 over the budget,
        else highest throughput)."""
        candidates = list(points)
        if not candidates:
            return None
        if self.latency_budget_ms is not None:
            return min(candidates, key=lambda p: (p.p99_ms, -p.throughput))
        return max(candidates, key=lambda p: (p.throughput, -p.p99_ms))

    def improves(self, new: Point | None, old: Point | None) -> bool:
        """Whether `new` beats `old` by more than MIN_GAIN (any feasible point beats none)."""
        if new is None:
            return False
        if old is None:
            return True
        a, b = self.value(new), self.value(old)
        return a > b + abs(b) * MIN_GAIN


def pareto_front(points: Sequence[Point]) -> list[Point]:
    """The points no other point beats on both throughput (higher) and p99 (lower), by throughput."""
    front: list[Point] = []
    for point in sorted(points, key=lambda p: (p.p99_ms, -p.throughput)):
        if not front or point.throughput > front[-1].throughput:
            front.append(point)
    return sorted(front, key=lambda p: p.throughput)
