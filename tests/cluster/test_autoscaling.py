"""The autoscaling policy's count of a deployment's ongoing requests: its engines' or Ray's, the larger."""

from __future__ import annotations

from modelhost.cluster.autoscaling import ongoing_requests, queue_load
from modelhost.cluster.replica import ONGOING_METRIC, QUEUE_METRIC


def test_the_engines_count_is_summed_over_replicas_and_wins_when_larger() -> None:
    engines = {ONGOING_METRIC: {"replica-1": 3.0, "replica-2": 4.5}}
    assert ongoing_requests(engines, ray_count=2.0) == 7.5  # requests over modelhost's link: Ray saw 2


def test_rays_count_wins_when_the_engines_have_not_reported() -> None:
    assert ongoing_requests(None, ray_count=5.0) == 5.0
    assert ongoing_requests({"other": {"r": 9.0}}, ray_count=1.0) == 1.0


def test_a_queue_time_target_asks_for_replicas_in_proportion() -> None:
    # Ray's policy asks for load / target_ongoing replicas: 2 replicas whose requests wait 30 ms for a 10 ms
    # target ask for 6; waiting 5 ms, for 1; nothing reported, for none beyond the minimum.
    waiting = {QUEUE_METRIC: {"replica-1": 20.0, "replica-2": 40.0}}
    assert queue_load(waiting, replicas=2, target_ongoing=4, target_queue_ms=10) / 4 == 6
    assert queue_load({QUEUE_METRIC: {"r": 5.0, "s": 5.0}}, 2, 4, 10) / 4 == 1
    assert queue_load(None, 2, 4, 10) == 0
