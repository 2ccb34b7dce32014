"""Running openvino instances: answers against OpenVINO's own, every datatype, batch sizes, padding, strings."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import openvino as ov
import pytest
from ov_test_models import Load, MakeModel, add_sub, fixed_inner_batch, identity, mlp, reference, row_sum
from tritonclient.grpc.model_config_pb2 import DataType

from modelhost.backends.api import BackendContext
from modelhost.backends.model_config import load_model_config
from modelhost.backends.openvino.backend import OpenVINOBackend
from modelhost.errors import BackendInvalidArgument, InternalError


def test_mlp_matches_openvino(make_model: MakeModel, load: Load) -> None:
    model = mlp((16, 32, 32, 4))
    instance = load(make_model("mlp", model, "max_batch_size: 8"))
    for rows in (1, 3, 8):
        x = np.random.default_rng(rows).standard_normal((rows, 16)).astype(np.float32)
        out = instance.execute({"INPUT0": x}, ["OUTPUT0"])["OUTPUT0"]
        (expected,) = reference(model, {"INPUT0": x}, INFERENCE_PRECISION_HINT="f32")
        assert out.shape == (rows, 4)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_hint_bf16_yes_computes_in_bf16(make_model: MakeModel, load: Load) -> None:
    model = mlp((16, 32, 4))
    bf16 = 'parameters { key: "HINT_BF16" value: { string_value: "YES" } }'
    instance = load(make_model("mlp", model, bf16))
    x = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)
    out = instance.execute({"INPUT0": x}, ["OUTPUT0"])["OUTPUT0"]
    (expected,) = reference(model, {"INPUT0": x}, INFERENCE_PRECISION_HINT="f32")
    np.testing.assert_allclose(out, expected, rtol=5e-2, atol=5e-2)


def test_outputs_are_copies(make_model: MakeModel, load: Load) -> None:
    instance = load(make_model("m", add_sub()))
    ones = np.ones((2, 4), np.float32)
    first = instance.execute({"INPUT0": ones, "INPUT1": ones}, ["OUTPUT0"])["OUTPUT0"]
    instance.execute({"INPUT0": ones * 5, "INPUT1": ones}, ["OUTPUT0"])
    np.testing.assert_array_equal(first, np.full((2, 4), 2, np.float32))


def test_a_left_out_input_is_refused_not_read_from_the_last_batch(make_model: MakeModel, load: Load) -> None:
    # An `optional` input a request leaves out: OpenVINO would reuse the last batch's (freed) tensor.
    instance = load(make_model("m", add_sub()))
    ones = np.ones((2, 4), np.float32)
    instance.execute({"INPUT0": ones, "INPUT1": ones}, ["OUTPUT0"])
    with pytest.raises(
        BackendInvalidArgument, match=r"needs every input on the OpenVINO backend; missing: \['INPUT1'\]"
    ):
        instance.execute({"INPUT0": ones}, ["OUTPUT0"])
    both = instance.execute({"INPUT0": ones, "INPUT1": ones * 3}, ["OUTPUT0"])["OUTPUT0"]
    np.testing.assert_array_equal(both, np.full((2, 4), 4, np.float32))


def test_only_the_requested_outputs(make_model: MakeModel, load: Load) -> None:
    instance = load(make_model("m", add_sub()))
    ones = np.ones((1, 4), np.float32)
    assert list(instance.execute({"INPUT0": ones, "INPUT1": ones}, ["OUTPUT1"])) == ["OUTPUT1"]


@pytest.mark.parametrize(
    ("element", "values"),
    [
        (ov.Type.boolean, np.array([[True, False, True]])),
        (ov.Type.u8, np.array([[0, 7, 255]], np.uint8)),
        (ov.Type.u16, np.array([[0, 7, 65535]], np.uint16)),
        (ov.Type.u32, np.array([[0, 7, 2**32 - 1]], np.uint32)),
        # OpenVINO's CPU plugin runs 64-bit integers as 32-bit ones and f64 as f32 (see the test below).
        (ov.Type.u64, np.array([[0, 7, 2**31 - 1]], np.uint64)),
        (ov.Type.i8, np.array([[-128, 0, 127]], np.int8)),
        (ov.Type.i16, np.array([[-300, 0, 300]], np.int16)),
        (ov.Type.i32, np.array([[-(2**31), 0, 2**31 - 1]], np.int32)),
        (ov.Type.i64, np.array([[-(2**31), 0, 2**31 - 1]], np.int64)),
        (ov.Type.f16, np.array([[-1.5, 0, 65504]], np.float16)),
        (ov.Type.f32, np.array([[-1.5, 0, 3.25e38]], np.float32)),
        (ov.Type.f64, np.array([[-1.5, 0.25, 2.0**100]], np.float64)),
    ],
)
def test_numeric_datatypes_round_trip(
    make_model: MakeModel, load: Load, element: Any, values: np.ndarray
) -> None:
    instance = load(make_model("m", identity(element)))
    out = instance.execute({"X": values}, ["Y"])["Y"]
    assert out.dtype == values.dtype
    np.testing.assert_array_equal(out, values)


@pytest.mark.parametrize(
    ("element", "values"),
    [
        (ov.Type.i64, np.array([[-(2**40), 3, 2**40 + 5]], np.int64)),
        (ov.Type.f64, np.array([[1e-300, 1e300, 1 / 3]], np.float64)),
    ],
)
def test_wide_types_answer_as_openvino_does(
    make_model: MakeModel, load: Load, element: Any, values: np.ndarray
) -> None:
    model = identity(element)
    instance = load(make_model("m", model))
    out = instance.execute({"X": values}, ["Y"])["Y"]
    (expected,) = reference(model, {"X": values})
    assert out.dtype == values.dtype
    np.testing.assert_array_equal(out, expected)


def test_bf16_travels_as_raw_words(make_model: MakeModel, load: Load) -> None:
    floats = np.array([[1.0, -2.5, 3.0e10]], np.float32)
    words = (floats.view(np.uint32) >> 16).astype(np.uint16)
    model_dir = make_model("m", identity(ov.Type.bf16))
    assert DataType.Name(load_model_config(model_dir).input[0].data_type) == "TYPE_BF16"
    instance = load(model_dir)
    out = instance.execute({"X": words}, ["Y"])["Y"]
    assert out.dtype == np.uint16
    np.testing.assert_array_equal(out, words)


def test_strings_round_trip(make_model: MakeModel, load: Load) -> None:
    instance = load(make_model("m", identity(ov.Type.string, (-1, 2))))
    values = np.array([[b"ab", "ünï".encode()], [b"", b"\x00x\xff"]], dtype=object)
    out = instance.execute({"X": values}, ["Y"])["Y"]
    assert out.dtype == np.object_
    assert out.shape == (2, 2)
    assert out.tolist() == values.tolist()


def test_a_string_ending_in_nul_is_refused(make_model: MakeModel, load: Load) -> None:
    instance = load(make_model("m", identity(ov.Type.string, (-1, 2))))
    with pytest.raises(BackendInvalidArgument, match="cannot hold an element that ends in a NUL byte"):
        instance.execute({"X": np.array([[b"a", b"b\x00"]], dtype=object)}, ["Y"])


def test_scalar_per_batch_item(make_model: MakeModel, load: Load) -> None:
    instance = load(make_model("m", row_sum()))
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(instance.execute({"X": x}, ["SUM"])["SUM"], [6, 22])


def test_variable_dims_without_batching(make_model: MakeModel, load: Load) -> None:
    instance = load(make_model("m", add_sub(shape=(-1, -1)), "max_batch_size: 0"), default_max_batch_size=0)
    for shape in ((1, 1), (3, 5)):
        a = np.full(shape, 2, np.float32)
        out = instance.execute({"INPUT0": a, "INPUT1": a}, ["OUTPUT0", "OUTPUT1"])
        np.testing.assert_array_equal(out["OUTPUT0"], a * 2)
        np.testing.assert_array_equal(out["OUTPUT1"], a * 0)


SKIP = 'parameters { key: "SKIP_OV_DYNAMIC_BATCHSIZE" value: { string_value: "YES" } }\n'
PAD = 'parameters { key: "ENABLE_BATCH_PADDING" value: { string_value: "YES" } }\n'


def test_fixed_batch_refuses_other_sizes_as_triton_does(make_model: MakeModel, load: Load) -> None:
    instance = load(make_model("m", mlp(), "max_batch_size: 4\n" + SKIP))
    assert instance.execute({"INPUT0": np.ones((4, 8), np.float32)}, ["OUTPUT0"])["OUTPUT0"].shape == (4, 3)
    with pytest.raises(
        InternalError, match=r"expected requests with batch size '4', got '3'\.\.\. this error can be"
    ):
        instance.execute({"INPUT0": np.ones((3, 8), np.float32)}, ["OUTPUT0"])


def test_fixed_batch_pads_smaller_batches(make_model: MakeModel, load: Load) -> None:
    model = mlp()
    instance = load(make_model("m", model, "max_batch_size: 4\n" + SKIP + PAD))
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    out = instance.execute({"INPUT0": x}, ["OUTPUT0"])["OUTPUT0"]
    (expected,) = reference(model, {"INPUT0": x}, INFERENCE_PRECISION_HINT="f32")
    assert out.shape == (3, 3)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_padding_a_model_that_only_runs_at_its_own_batch(make_model: MakeModel, load: Load) -> None:
    instance = load(make_model("m", fixed_inner_batch(4), "max_batch_size: 4\n" + PAD))
    x = np.arange(-6, 6, dtype=np.float32).reshape(2, 6)
    out = instance.execute({"X": x}, ["Y"])["Y"]
    np.testing.assert_array_equal(out, np.maximum(x, 0).reshape(2, 2, 3))


def test_padding_strings(make_model: MakeModel, load: Load) -> None:
    instance = load(make_model("m", identity(ov.Type.string, (-1, 2)), "max_batch_size: 3\n" + SKIP + PAD))
    values = np.array([[b"a", b"b"]], dtype=object)
    assert instance.execute({"X": values}, ["Y"])["Y"].tolist() == [[b"a", b"b"]]


def test_instances_run_side_by_side(make_model: MakeModel, ctx_of: Callable[..., BackendContext]) -> None:
    model = mlp((16, 64, 4))
    model_dir = make_model("m", model, "max_batch_size: 8")
    config = load_model_config(model_dir)
    backend, ctx = OpenVINOBackend(), ctx_of(model_dir, config, 2)
    instances = [backend.load_instance(ctx, config.instance_group[0], i, 0) for i in range(2)]
    inputs = [np.random.default_rng(i).standard_normal((8, 16)).astype(np.float32) for i in range(2)]
    expected = [reference(model, {"INPUT0": x}, INFERENCE_PRECISION_HINT="f32")[0] for x in inputs]
    failures: list[BaseException] = []

    def run(i: int) -> None:
        try:
            for _ in range(50):
                out = instances[i].execute({"INPUT0": inputs[i]}, ["OUTPUT0"])["OUTPUT0"]
                np.testing.assert_allclose(out, expected[i], rtol=1e-5, atol=1e-6)
        except BaseException as e:
            failures.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for instance in instances:
        instance.close()
    assert failures == []


def test_a_closed_instance_fails_cleanly(make_model: MakeModel, load: Load) -> None:
    instance = load(make_model("m", mlp()))
    instance.close()
    instance.close()  # twice is harmless
    with pytest.raises(InternalError):
        instance.execute({"INPUT0": np.ones((1, 8), np.float32)}, ["OUTPUT0"])


def test_a_pass_through_model_survives_changing_shapes(make_model: MakeModel, load: Load) -> None:
    # A same-type Convert compiles to Result(Parameter): OpenVINO's CPU plugin corrupts memory on such a model
    # when handed tensors of ours whose shape changes; its inputs are copied instead.
    instance = load(
        make_model("m", identity(ov.Type.f32, (-1, -1)), "max_batch_size: 0"), default_max_batch_size=0
    )
    assert instance._plan.copy_inputs
    for shape in [(5, 3), (1, 7), (2, 2), (3, 9), (1, 1), (40, 40)] * 3:
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        np.testing.assert_array_equal(instance.execute({"X": x}, ["Y"])["Y"], x)


def test_other_models_get_their_inputs_zero_copy(make_model: MakeModel, load: Load) -> None:
    assert not load(make_model("m", mlp()))._plan.copy_inputs
