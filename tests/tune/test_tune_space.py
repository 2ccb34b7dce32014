"""The tuner's search space, searches, goal and checkpoint, without a server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.tune import checkpoint
from modelhost.tune.checkpoint import CheckpointError, RunState
from modelhost.tune.goal import Goal, pareto_front
from modelhost.tune.options import parse_args, parse_duration
from modelhost.tune.point import Point
from modelhost.tune.prices import cost_per_million, parse_price
from modelhost.tune.search import brute_variants, neighbours
from modelhost.tune.space import KIND_CPU, KIND_GPU, Variant, apply, base_variant, build_space, problem

MLP = """
name: "mlp"
platform: "onnxruntime_onnx"
backend: "onnxruntime"
max_batch_size: 64
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 256 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 10 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
parameters { key: "execution_mode" value: { string_value: "0" } }
"""


def config(text: str = MLP) -> ModelConfig:
    return text_format.Parse(text, ModelConfig())


def point(variant: str, concurrency: int, throughput: float, p99: float) -> Point:
    return Point(
        variant, concurrency, throughput, p99 / 2, p99 * 0.8, p99 * 0.9, p99, p99 / 2,
        0.1, 0.01, 0.2, 0.01, 0.05, 0.3, 1.0, 100.0, None, None, True, 1.0, 1,
    )  # fmt: skip


def test_base_variant_reads_the_swept_fields() -> None:
    base = base_variant(config())
    assert base == Variant(1, KIND_CPU, 64, False)
    batched = config(
        MLP + "dynamic_batching { max_queue_delay_microseconds: 100 preferred_batch_size: [ 64 ] }"
    )
    # Triton's default preferred size ([max_batch_size]) reads as "not set".
    assert base_variant(batched) == Variant(1, KIND_CPU, 64, True, 100, ())


def test_a_cpu_host_never_gets_gpu_instances() -> None:
    cpu = build_space(config(), gpu_count=0, cores=2)
    assert cpu.kinds == [KIND_CPU]
    assert all(v.kind == KIND_CPU for v in brute_variants(cpu, base_variant(config())))
    assert all(v.kind == KIND_CPU for v in neighbours(base_variant(config()), cpu))
    gpu = build_space(config(), gpu_count=1, cores=2)
    assert KIND_GPU in gpu.kinds
    assert any(v.kind == KIND_GPU for v in neighbours(base_variant(config()), gpu))


def test_space_uses_model_analyzer_ranges_and_the_backend_thread_parameter() -> None:
    space = build_space(config(), gpu_count=0, cores=4)
    assert space.instances == [1, 2, 3, 4, 5]
    assert space.batch_sizes == [1, 2, 4, 8, 16, 32, 64, 128]
    assert space.concurrencies == [2**i for i in range(11)]
    assert space.thread_parameter == "intra_op_thread_count"
    assert space.thread_values == ["", "1", "2", "4"]
    # a model that cannot batch keeps max_batch_size 0 and never gets a dynamic batcher
    nobatch = build_space(
        config(MLP.replace("max_batch_size: 64", "max_batch_size: 0")), gpu_count=0, cores=2
    )
    assert nobatch.batch_sizes == [0] and not nobatch.batching
    assert all(not v.dynamic_batching for v in brute_variants(nobatch, base_variant(config())))


def test_brute_is_every_instance_count_by_batch_size_with_dynamic_batching() -> None:
    space = build_space(config(), gpu_count=0, cores=2, max_instance_count=2, max_model_batch_size=4)
    base = base_variant(config())
    variants = brute_variants(space, base)
    assert variants[0] == base
    # the current max_batch_size (64) stays a candidate above --max-model-batch-size
    assert {(v.instances, v.max_batch_size) for v in variants[1:]} == {
        (i, b) for i in (1, 2) for b in (1, 2, 4, 64)
    }
    assert all(v.dynamic_batching for v in variants[1:])


def test_neighbours_are_one_step_away_valid_and_most_promising_first() -> None:
    space = build_space(config(), gpu_count=0, cores=2)
    base = base_variant(config())
    found = list(neighbours(base, space))
    assert found[0] == Variant(1, KIND_CPU, 64, True)  # dynamic batching first
    assert Variant(2, KIND_CPU, 64, False) in found
    assert Variant(1, KIND_CPU, 128, False) in found
    assert Variant(1, KIND_CPU, 32, False) in found
    assert Variant(1, KIND_CPU, 64, False, threads="1") in found
    assert len({v.key for v in found}) == len(found)
    for variant in found:
        assert problem(variant, config(), 0, space.thread_parameter) is None
        differences = [
            f
            for f in ("instances", "max_batch_size", "dynamic_batching", "threads")
            if getattr(variant, f) != getattr(base, f)
        ]
        assert len(differences) == 1
    batched = Variant(2, KIND_CPU, 64, True, 100)
    around = list(neighbours(batched, space))
    assert Variant(2, KIND_CPU, 64, True, 500) in around
    assert Variant(2, KIND_CPU, 64, True, 0) in around
    assert Variant(2, KIND_CPU, 64, True, 100, (32, 64)) in around
    assert all(max(v.preferred, default=0) <= v.max_batch_size for v in around)


def test_apply_changes_only_the_swept_fields() -> None:
    base = config()
    variant = Variant(3, KIND_CPU, 16, True, 500, (8, 16), "2")
    made = apply(variant, base, "intra_op_thread_count")
    assert made.instance_group[0].count == 3
    assert made.max_batch_size == 16
    assert made.dynamic_batching.max_queue_delay_microseconds == 500
    assert list(made.dynamic_batching.preferred_batch_size) == [8, 16]
    assert made.parameters["intra_op_thread_count"].string_value == "2"
    assert made.parameters["execution_mode"].string_value == "0"  # kept
    assert list(made.input) == list(base.input)
    assert base.max_batch_size == 64  # not changed
    assert base_variant(made) == variant
    back = apply(Variant(1, KIND_CPU, 64, False), made, "intra_op_thread_count")
    assert not back.HasField("dynamic_batching")
    assert "intra_op_thread_count" not in back.parameters


def test_candidates_are_checked_with_the_servers_rules_before_loading() -> None:
    served = config()
    assert (
        problem(Variant(1, KIND_CPU, 8, True, 0, (16,)), served, 0, None) is not None
    )  # preferred above max
    message = problem(Variant(1, KIND_GPU, 64, False), served, 0, None)
    assert message is not None and "GPU" in message
    assert problem(Variant(2, KIND_CPU, 64, True, 100, (32, 64)), served, 0, None) is None


def test_goal_constraints_objectives_and_pareto_front() -> None:
    points = [
        point("a", 1, 100, 1.0),
        point("a", 2, 180, 3.0),
        point("b", 4, 300, 9.0),
        point("b", 8, 320, 25.0),
    ]
    goal = Goal("throughput", latency_budget_ms=10)
    best = goal.best(points)
    assert best is not None and best.throughput == 300
    assert Goal("latency").best(points) == points[0]
    assert Goal("throughput", min_throughput=1000).best(points) is None
    assert [p.throughput for p in pareto_front([*points, point("c", 1, 150, 5.0)])] == [100, 180, 300, 320]
    assert goal.improves(point("x", 1, 310, 1.0), point("y", 1, 300, 1.0))
    assert not goal.improves(point("x", 1, 303, 1.0), point("y", 1, 300, 1.0))  # within the noise margin
    assert goal.improves(point("x", 1, 1, 1.0), None)
    priced = Goal("cost", price_per_hour=0.36)
    assert priced.cost(points[0]) == pytest.approx(1.0)  # 0.36 $/h at 100/s = 360,000 per hour
    assert priced.best(points) == points[3]


def test_prices_from_a_number_or_the_table() -> None:
    assert parse_price("0.5") == (0.5, "0.5 per hour")
    assert parse_price("c6i.xlarge")[0] == 0.17
    with pytest.raises(ValueError, match=r"c6i\.large"):
        parse_price("z9.huge")
    with pytest.raises(ValueError):
        parse_price("-1")
    assert cost_per_million(3.6, 1000) == pytest.approx(1.0)
    assert cost_per_million(1, 0) is None


def test_checkpoint_round_trip_and_refusals(tmp_path: Path) -> None:
    state = RunState("mlp", {"config": "x"})
    base = state.record(Variant(1, KIND_CPU, 64, False), default=True)
    other = state.record(Variant(2, KIND_CPU, 64, True))
    other.errors[64] = "503"
    failed = state.record(Variant(3, KIND_CPU, 64, True))
    failed.failure = "out of memory"
    state.points[(base.variant.key, 1)] = point(base.variant.key, 1, 10, 1)
    checkpoint.save(state, tmp_path)
    assert [r.name for r in state.variants.values()] == ["mlp_config_default", "mlp_config_0", "mlp_config_1"]
    loaded = checkpoint.load(tmp_path, "mlp", {"config": "x"})
    assert loaded.runs == 2
    assert loaded.points == state.points
    assert loaded.variants[failed.variant.key].failure == "out of memory"
    assert loaded.variants[other.variant.key].errors == {64: "503"}
    with pytest.raises(CheckpointError, match="other settings"):
        checkpoint.load(tmp_path, "mlp", {"config": "y"})
    with pytest.raises(CheckpointError, match="for model 'mlp'"):
        checkpoint.load(tmp_path, "bert", {"config": "x"})
    (tmp_path / checkpoint.FILENAME).write_text(json.dumps({"format": 1, "model": "mlp"}))
    with pytest.raises(CheckpointError, match="damaged"):
        checkpoint.load(tmp_path, "mlp", {"config": "x"})
    with pytest.raises(CheckpointError, match="no checkpoint"):
        checkpoint.load(tmp_path / "none", "mlp", {})


def test_command_line() -> None:
    options = parse_args(
        ["-m", "mlp", "--model-repository", "r", "--time-limit", "1h30m", "--instance-price", "c6i.large"]
    )
    assert options.time_limit_s == 5400
    assert options.price_per_hour == 0.085
    assert options.output == "tune_results/mlp"
    remote = parse_args(["-m", "mlp", "--url", "http://10.0.0.5:8000"])
    assert remote.url == "10.0.0.5:8000" and remote.metrics_url == "http://10.0.0.5:8002/metrics"
    assert parse_duration("90s") == 90 and parse_duration("10m") == 600 and parse_duration("45") == 45
    for bad in (
        ["-m", "mlp"],
        ["-m", "mlp", "--url", "h:1", "--server-flag=--x"],
        ["-m", "m", "--url", "h:1", "--objective", "cost"],
    ):
        with pytest.raises(SystemExit):
            parse_args(bad)
    with pytest.raises(SystemExit):
        parse_args(["-m", "mlp", "--model-repository", "r", "--time-limit", "ten minutes"])
