"""The two searches over a Space.

brute   Model Analyzer's automatic sweep: the current config, then every instance count x max_batch_size (with
        dynamic batching where the model batches), each at rising concurrency; the other fields as the current
        config has them.
quick   hill-climbing from the current config: measure every neighbour (one field one step away) of the current
        best, move to the best of them if it beats the current one by more than goal.MIN_GAIN, stop when none
        does. Neighbours are tried most promising field first, so a time limit cuts the least useful ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from modelhost.tune.point import Point
from modelhost.tune.session import Session
from modelhost.tune.space import KIND_CPU, KIND_GPU, Space, Variant

QUICK_PATIENCE = 2


def brute_variants(space: Space, base: Variant) -> list[Variant]:
    variants = [base]
    for kind in space.kinds:
        for instances in space.instances:
            for batch in space.batch_sizes:
                variants.append(
                    Variant(
                        instances=instances,
                        kind=kind,
                        max_batch_size=batch,
                        dynamic_batching=space.batching,
                        queue_delay_us=base.queue_delay_us if base.dynamic_batching else 0,
                        preferred=base.preferred if base.preferred and max(base.preferred) <= batch else (),
                        threads=base.threads,
                    )
                )
    unique: dict[str, Variant] = {}
    for variant in variants:
        unique.setdefault(variant.key, variant)
    return list(unique.values())


def _next(values: list[int], current: int, offset: int) -> int | None:
    if current not in values:
        return None
    index = values.index(current) + offset
    return values[index] if 0 <= index < len(values) else None


def neighbours(variant: Variant, space: Space) -> Iterator[Variant]:
    """The variants one field one step away, most promising first; each in the space and valid together."""
    v = variant
    candidates: list[Variant] = []
    if space.batching and not v.dynamic_batching and v.max_batch_size > 0:
        candidates.append(replace(v, dynamic_batching=True, queue_delay_us=0, preferred=()))
    up, down = _next(space.instances, v.instances, 1), _next(space.instances, v.instances, -1)
    bigger, smaller = (
        _next(space.batch_sizes, v.max_batch_size, 1),
        _next(space.batch_sizes, v.max_batch_size, -1),
    )
    longer, shorter = (
        _next(space.queue_delays, v.queue_delay_us, 1),
        _next(space.queue_delays, v.queue_delay_us, -1),
    )
    if up is not None:
        candidates.append(replace(v, instances=up))
    if bigger is not None and v.max_batch_size > 0:
        candidates.append(replace(v, max_batch_size=bigger, preferred=()))
    if v.dynamic_batching and longer is not None:
        candidates.append(replace(v, queue_delay_us=longer))
    if down is not None:
        candidates.append(replace(v, instances=down))
    if smaller is not None and smaller > 0:
        candidates.append(replace(v, max_batch_size=smaller, preferred=()))
    if v.dynamic_batching:
        if shorter is not None:
            candidates.append(replace(v, queue_delay_us=shorter))
        candidates += [
            replace(v, preferred=p) for p in space.preferred_options(v.max_batch_size) if p != v.preferred
        ]
    if v.threads in space.thread_values:
        index = space.thread_values.index(v.threads)
        candidates += [
            replace(v, threads=space.thread_values[i])
            for i in (index + 1, index - 1)
            if 0 <= i < len(space.thread_values)
        ]
    if v.dynamic_batching:
        candidates.append(replace(v, dynamic_batching=False, queue_delay_us=0, preferred=()))
    candidates += [
        replace(v, kind=kind) for kind in (KIND_GPU, KIND_CPU) if kind != v.kind and kind in space.kinds
    ]
    seen: set[str] = {v.key}
    for candidate in candidates:
        if candidate.key not in seen and space.contains(candidate):
            seen.add(candidate.key)
            yield candidate


def run_brute(session: Session, base: Variant) -> None:
    """TimeUp ends it early; what was measured stays."""
    for variant in brute_variants(session.space, base):
        session.sweep(variant)


def run_quick(session: Session, base: Variant) -> None:
    """TimeUp ends it early; what was measured stays."""
    goal = session.goal
    session.sweep(base)
    current, best = base, session.best_point(base)
    visited = {base.key}
    while True:
        start = max(1, best.concurrency // 2) if best is not None else 1
        better: list[tuple[Variant, Point]] = []
        for candidate in neighbours(current, session.space):
            if candidate.key in visited:
                continue
            visited.add(candidate.key)
            session.sweep(candidate, start=start, patience=QUICK_PATIENCE)
            point = session.best_point(candidate)
            if point is not None and goal.improves(point, best):
                better.append((candidate, point))
        if not better:
            return
        current, best = max(better, key=lambda pair: goal.rank_key(pair[1]))
