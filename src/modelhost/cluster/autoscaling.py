"""The autoscaling policy of modelhost's deployments: Ray Serve's own, on what modelhost's engines report.

The ingress sends inference over modelhost's link straight to a replica's engine, which Ray's count of ongoing
requests (what its default policy scales on) does not see. Each replica reports two custom metrics from its
engine (`record_autoscaling_stats`): the requests it holds, queued or running (`replica.ONGOING_METRIC`), and the
mean queue time of the requests it answered since the last report (`replica.QUEUE_METRIC`). `Policy` hands Ray's
default policy the load it should scale on, so that Ray's delays, smoothing and bounds keep their meaning:

- by default, the larger of the engines' ongoing requests and Ray's own count (requests that came through Ray's
  handles are in both), against `target_ongoing_requests`;
- with `target_queue_time_ms` (modelhost's key in the deployment file), the queue time: the deployment grows by
  the ratio of the mean queue time to the target, and shrinks when requests wait less.
"""

from __future__ import annotations

from typing import Any

from modelhost.cluster.replica import ONGOING_METRIC, QUEUE_METRIC

# What a deployment's autoscaling_config names as its policy.
POLICY = "modelhost.cluster.autoscaling:Policy"


def ongoing_requests(aggregated: dict[str, dict[Any, float]] | None, ray_count: float) -> float:
    """The deployment's ongoing requests: its engines' (summed over replicas) or Ray's, the larger."""
    engines = sum((aggregated or {}).get(ONGOING_METRIC, {}).values())
    return max(float(engines), float(ray_count))


def queue_load(
    aggregated: dict[str, dict[Any, float]] | None,
    replicas: int,
    target_ongoing: float,
    target_queue_ms: float,
) -> float:
    """The load that makes Ray's policy ask for `replicas * mean queue time / target`: Ray's policy asks for
    load / target_ongoing replicas."""
    queue_ms = list((aggregated or {}).get(QUEUE_METRIC, {}).values())
    mean = sum(queue_ms) / len(queue_ms) if queue_ms else 0.0
    return replicas * target_ongoing * mean / target_queue_ms


class Policy:
    """A Ray Serve autoscaling policy (`AutoscalingContext` -> (replicas, state)), made once per deployment with
    the `policy_kwargs` of its config."""

    def __init__(self, target_queue_time_ms: float = 0.0) -> None:
        self.target_queue_time_ms = float(target_queue_time_ms)

    def __call__(self, ctx: Any) -> tuple[int | float, dict[str, Any]]:
        from ray.serve.autoscaling_policy import replica_queue_length_autoscaling_policy

        ongoing = ongoing_requests(ctx.aggregated_metrics, ctx.total_num_requests)
        load = ongoing
        if self.target_queue_time_ms > 0 and ctx.current_num_replicas > 0:
            target_ongoing = ctx.config.get_target_ongoing_requests()
            load = queue_load(
                ctx.aggregated_metrics, ctx.current_num_replicas, target_ongoing, self.target_queue_time_ms
            )
        # total_num_requests is a functools.cached_property: an entry in the instance's dict replaces its value.
        ctx.__dict__["total_num_requests"] = load
        return replica_queue_length_autoscaling_policy(ctx)
