"""The autoscaling policy's count of a deployment's ongoing requests: its engines' or Ray's, the larger."""

from __future__ import annotations

from modelhost.cluster.autoscaling import ongoing_requests
from modelhost.cluster.replica import ONGOING_METRIC


def test_the_engines_count_is_summed_over_replicas_and_wins_when_larger() -> None:
    engines = {ONGOING_METRIC: {"replica-1": 3.0, "replica-2": 4.5}}
    assert ongoing_requests(engines, ray_count=2.0) == 7.5  # requests over modelhost's link: Ray saw 2


def test_rays_count_wins_when_the_engines_have_not_reported() -> None:
    assert ongoing_requests(None, ray_count=5.0) == 5.0
    assert ongoing_requests({"other": {"r": 9.0}}, ray_count=1.0) == 1.0
