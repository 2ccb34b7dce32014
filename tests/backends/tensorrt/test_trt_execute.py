"""Requests on a TensorRT instance: shapes checked against the instance's profiles (a 400 that names the input
and the range), the closest profile chosen, faults of the runtime turned into 500s."""

from __future__ import annotations

import numpy as np
import pytest
from trt_fakes import FakeExecutor, batch_engine, dynamic_input, engine, output

from modelhost.backends.tensorrt.engine import EngineDescription
from modelhost.backends.tensorrt.instance import TensorRTInstance
from modelhost.backends.tensorrt.settings import TensorRTSettings
from modelhost.errors import BackendInvalidArgument, InternalError
from modelhost.frontends.http.statuses import http_status


def _instance(description: EngineDescription, profiles: list[int]) -> tuple[TensorRTInstance, FakeExecutor]:
    executor = FakeExecutor(description, profiles, TensorRTSettings(), 0, 8)
    return TensorRTInstance("trt_0", "trt", description, profiles, executor), executor


def _x(batch: int, width: int = 3) -> dict[str, np.ndarray]:
    return {"x": np.ones((batch, width), dtype=np.float32)}


def test_a_batch_within_the_profile_runs() -> None:
    instance, executor = _instance(batch_engine(max_batch=8), [0])
    out = instance.execute(_x(5), ["y"])
    assert out["y"].shape == (5, 2)
    assert executor.runs == [(0, {"x": (5, 3)})]


def test_a_batch_over_the_profiles_max_is_a_400_naming_the_range() -> None:
    instance, executor = _instance(batch_engine(max_batch=8), [0])
    with pytest.raises(BackendInvalidArgument) as e:
        instance.execute(_x(9), ["y"])
    assert str(e.value) == (
        "request specifies invalid shape for input 'x' for trt_0. Error details: model expected the shape of "
        "dimension 0 to be between 1 and 8 but received 9"
    )
    assert (http_status(e.value), e.value.failure_reason) == (400, "BACKEND")
    assert executor.runs == []


def test_a_dimension_under_the_profiles_min_is_refused() -> None:
    description = engine(dynamic_input("x", (-1, -1), ((1, 4), (2, 8), (8, 16))), output("y", (-1, 2)))
    instance, _ = _instance(description, [0])
    with pytest.raises(BackendInvalidArgument, match="dimension 1 to be between 4 and 16 but received 3"):
        instance.execute(_x(2, width=3), ["y"])


def test_a_rank_the_engine_does_not_take_is_refused() -> None:
    instance, _ = _instance(batch_engine(), [0])
    with pytest.raises(BackendInvalidArgument, match="model expected 2 dimensions but received 3 dimensions"):
        instance.execute({"x": np.ones((1, 3, 1), dtype=np.float32)}, ["y"])


def _two_profiles() -> EngineDescription:
    # profile 0: batches 1..4 tuned for 2; profile 1: batches 1..16 tuned for 16
    return engine(
        dynamic_input("x", (-1, 3), ((1, 3), (2, 3), (4, 3)), ((1, 3), (16, 3), (16, 3))),
        output("y", (-1, 2)),
        num_profiles=2,
    )


@pytest.mark.parametrize(("batch", "profile"), [(1, 0), (3, 0), (12, 1), (16, 1)])
def test_the_closest_profile_that_accepts_the_batch_runs_it(batch: int, profile: int) -> None:
    instance, executor = _instance(_two_profiles(), [0, 1])
    instance.execute(_x(batch), ["y"])
    assert executor.runs[-1][0] == profile


def test_no_profile_accepting_the_batch_is_a_400_listing_them() -> None:
    instance, _ = _instance(_two_profiles(), [0, 1])
    with pytest.raises(BackendInvalidArgument) as e:
        instance.execute(_x(17), ["y"])
    assert str(e.value) == (
        "failed to find any Optimization Profile among [0[0] 1[1]] of trt_0 to support the requested dimensions: "
        "profile 0: input 'x': model expected the shape of dimension 0 to be between 1 and 4 but received 17 | "
        "profile 1: input 'x': model expected the shape of dimension 0 to be between 1 and 16 but received 17"
    )


def test_an_instance_on_one_profile_of_several_uses_only_that_one() -> None:
    instance, executor = _instance(_two_profiles(), [1])
    instance.execute(_x(2), ["y"])
    assert executor.runs[-1][0] == 1


def test_an_input_the_engine_needs_is_required() -> None:
    description = engine(*batch_engine().tensors, dynamic_input("mask", (-1, 3), ((1, 3), (8, 3), (8, 3))))
    instance, _ = _instance(description, [0])
    with pytest.raises(BackendInvalidArgument, match="input 'mask' is required by the TensorRT engine"):
        instance.execute(_x(1), ["y"])


def test_a_runtime_fault_fails_the_batch_with_a_500() -> None:
    instance, executor = _instance(batch_engine(), [0])
    executor.fail_with = RuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered")
    with pytest.raises(InternalError) as e:
        instance.execute(_x(1), ["y"])
    assert str(e.value) == (
        "TensorRT error for model 'trt': cudaErrorIllegalAddress: an illegal memory access was encountered"
    )
    assert http_status(e.value) == 500


def test_a_request_error_from_the_runtime_stays_a_400() -> None:
    instance, executor = _instance(batch_engine(), [0])
    executor.fail_with = BackendInvalidArgument("TensorRT refused shape [1, 3] for input 'x'")
    with pytest.raises(BackendInvalidArgument):
        instance.execute(_x(1), ["y"])


def test_close_releases_the_executor_once() -> None:
    instance, executor = _instance(batch_engine(), [0])
    instance.close()
    instance.close()
    assert executor.closed
    with pytest.raises(InternalError, match="is closed"):
        instance.execute(_x(1), ["y"])
