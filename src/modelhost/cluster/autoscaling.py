"""The autoscaling policy of modelhost's deployments: Ray Serve's own, on the requests modelhost's engines hold.

The ingress sends inference over modelhost's link straight to a replica's engine, which Ray's count of ongoing
requests (what its default policy scales on) does not see. Each replica reports its engine's requests, queued or
running, as a custom metric (`replica.ONGOING_METRIC`, from `record_autoscaling_stats`); this policy gives Ray's
default policy the larger of that sum and Ray's own count (requests that came through Ray's handles are in both),
so `target_ongoing_requests`, the delays and the bounds keep their meaning.
"""

from __future__ import annotations

from typing import Any

from modelhost.cluster.replica import ONGOING_METRIC

# What a deployment's autoscaling_config names as its policy.
POLICY = "modelhost.cluster.autoscaling:policy"


def ongoing_requests(aggregated: dict[str, dict[Any, float]] | None, ray_count: float) -> float:
    """The deployment's ongoing requests: its engines' (summed over replicas) or Ray's, the larger."""
    engines = sum((aggregated or {}).get(ONGOING_METRIC, {}).values())
    return max(float(engines), float(ray_count))


def policy(ctx: Any) -> tuple[int | float, dict[str, Any]]:
    """A Ray Serve autoscaling policy (`AutoscalingContext` -> (replicas, state))."""
    from ray.serve.autoscaling_policy import replica_queue_length_autoscaling_policy

    # total_num_requests is a functools.cached_property: an entry in the instance's dict replaces its value.
    ctx.__dict__["total_num_requests"] = ongoing_requests(ctx.aggregated_metrics, ctx.total_num_requests)
    return replica_queue_length_autoscaling_policy(ctx)
