"""TorchScript instances loaded and run in this process, as the server loads and runs them, against the module's
own answers."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from modelhost.backends.pytorch.sharing import SHARED_MODULES
from modelhost.errors import BackendInvalidArgument, InternalError, InvalidArgument, ModelConfigError

from .conftest import Loader, ModelFactory, config_text, context, fp32, tensor
from .torch_test_models import (
    AddSub,
    Counter,
    DictIO,
    FirstRow,
    Identity10,
    Optional2,
    RowSum,
    Scale,
    ToDouble,
    Total,
    TwoOfList,
    Upper,
    script,
    trace,
)

ADD_SUB_CONFIG = config_text(
    f"{tensor('y')}, {tensor('x')}", f"{tensor('OUTPUT__1')}, {tensor('OUTPUT__0')}", max_batch_size=8
)


def test_forward_argument_names(make_model: ModelFactory, load_instance: Loader) -> None:
    instance = load_instance(make_model("add_sub", script(AddSub()), ADD_SUB_CONFIG))
    x, y = fp32([1, 2, 3, 4], [5, 6, 7, 8]), fp32([1, 1, 1, 1], [2, 2, 2, 2])
    out = instance.execute({"y": y, "x": x}, ["OUTPUT__0", "OUTPUT__1"])
    np.testing.assert_array_equal(out["OUTPUT__0"], x + y)
    np.testing.assert_array_equal(out["OUTPUT__1"], x - y)
    assert out["OUTPUT__0"].dtype == np.float32
    # Only the outputs asked for come back.
    assert list(instance.execute({"y": y, "x": x}, ["OUTPUT__1"])) == ["OUTPUT__1"]


def test_named_index_and_no_batching(make_model: ModelFactory, load_instance: Loader) -> None:
    config = config_text(
        f"{tensor('INPUT__1', dims='[ -1 ]')}, {tensor('INPUT__0', dims='[ -1 ]')}",
        tensor("OUTPUT__0", dims="[ -1 ]"),
    )
    instance = load_instance(make_model("scale", script(Scale()), config))
    a, b = np.array([1, 2, 3], dtype=np.float32), np.array([10, 20, 30], dtype=np.float32)
    out = instance.execute({"INPUT__1": b, "INPUT__0": a}, ["OUTPUT__0"])
    np.testing.assert_array_equal(out["OUTPUT__0"], a * 2 + b)


def test_traced_model_in_config_order(
    make_model: ModelFactory, load_instance: Loader, caplog: pytest.LogCaptureFixture
) -> None:
    config = config_text(f"{tensor('alpha')}, {tensor('beta')}", tensor("result"), max_batch_size=4)
    traced = trace(Scale(), torch.ones(1, 4), torch.ones(1, 4))
    with caplog.at_level(logging.WARNING):
        instance = load_instance(make_model("traced", traced, config))
    assert "Falling back to enforcing strict ordering from model configuration" in caplog.text
    a, b = fp32([1, 2, 3, 4]), fp32([0, 0, 0, 1])
    np.testing.assert_array_equal(instance.execute({"beta": b, "alpha": a}, ["result"])["result"], a * 2 + b)


def test_reshape_the_model_sees(make_model: ModelFactory, load_instance: Loader) -> None:
    config = config_text(
        tensor("x", more="reshape: { shape: [ 2, 2 ] }"), tensor("OUTPUT__0", dims="[ 2 ]"), max_batch_size=4
    )
    instance = load_instance(make_model("rowsum", script(RowSum()), config))
    x = np.arange(8, dtype=np.float32).reshape(2, 2, 2)  # the server hands the model its reshaped input
    np.testing.assert_array_equal(instance.execute({"x": x}, ["OUTPUT__0"])["OUTPUT__0"], x.sum(axis=-1))


def test_dict_in_dict_out(make_model: ModelFactory, load_instance: Loader) -> None:
    config = config_text(
        f"{tensor('a')}, {tensor('b')}", f"{tensor('sum')}, {tensor('prod')}", max_batch_size=2
    )
    instance = load_instance(make_model("dict", script(DictIO()), config))
    a, b = fp32([1, 2, 3, 4]), fp32([2, 2, 2, 2])
    out = instance.execute({"a": a, "b": b}, ["prod", "sum"])
    np.testing.assert_array_equal(out["sum"], a + b)
    np.testing.assert_array_equal(out["prod"], a * b)


def test_dict_result_without_a_configured_key(make_model: ModelFactory, load_instance: Loader) -> None:
    config = config_text(f"{tensor('a')}, {tensor('b')}", tensor("diff"), max_batch_size=2)
    instance = load_instance(make_model("dict", script(DictIO()), config))
    with pytest.raises(
        BackendInvalidArgument, match=r"output 'diff' .* not in the dictionary .*keys: prod, sum"
    ):
        instance.execute({"a": fp32([1, 2, 3, 4]), "b": fp32([1, 2, 3, 4])}, ["diff"])


def test_strings_in_and_out(make_model: ModelFactory, load_instance: Loader) -> None:
    config = config_text(
        tensor("words", "TYPE_STRING", "[ 1 ]", "reshape: { shape: [ ] }"),
        f"{tensor('UPPER__0', 'TYPE_STRING', '[ 1 ]', 'reshape: { shape: [ ] }')}, "
        f"{tensor('LENGTH__1', 'TYPE_INT64', '[ 1 ]', 'reshape: { shape: [ ] }')}",
        max_batch_size=4,
    )
    module = script(Upper())
    instance = load_instance(make_model("upper", module, config))
    words = ["abc", "d\xe9j\xe0"]
    out = instance.execute(
        {"words": np.array([w.encode() for w in words], dtype=object)}, ["UPPER__0", "LENGTH__1"]
    )
    upper, lengths = module(words)
    assert out["UPPER__0"].tolist() == [w.encode() for w in upper]
    assert out["LENGTH__1"].tolist() == lengths.tolist()
    with pytest.raises(InvalidArgument, match="input 'words' holds bytes that are not UTF-8"):
        instance.execute({"words": np.array([b"\xff"], dtype=object)}, ["UPPER__0"])


def test_string_tensors_are_one_dimensional(make_model: ModelFactory, load_instance: Loader) -> None:
    config = config_text(
        tensor("words", "TYPE_STRING", "[ 2 ]"), tensor("UPPER__0", "TYPE_STRING", "[ 2 ]"), max_batch_size=4
    )
    with pytest.raises(
        ModelConfigError, match="Triton only supports 1 dimensional List of String as input for 'words'"
    ):
        load_instance(make_model("upper", script(Upper()), config))


def test_every_datatype(make_model: ModelFactory, load_instance: Loader) -> None:
    kinds = ["BOOL", "UINT8", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BF16"]
    names = ["b", "u8", "i8", "i16", "i32", "i64", "f16", "f32", "f64", "bf16"]
    inputs = ", ".join(tensor(n, f"TYPE_{k}", "[ 3 ]") for n, k in zip(names, kinds, strict=True))
    outputs = ", ".join(tensor(f"OUT__{i}", f"TYPE_{k}", "[ 3 ]") for i, k in enumerate(kinds))
    module = script(Identity10())
    instance = load_instance(make_model("types", module, config_text(inputs, outputs, max_batch_size=2)))
    bf16 = torch.tensor([[1.5, -2.0, 3.25]], dtype=torch.bfloat16)
    arrays = {
        "b": np.array([[True, False, True]]),
        "u8": np.array([[0, 7, 254]], dtype=np.uint8),
        "i8": np.array([[-128, 0, 5]], dtype=np.int8),
        "i16": np.array([[-3, 0, 300]], dtype=np.int16),
        "i32": np.array([[-3, 0, 70000]], dtype=np.int32),
        "i64": np.array([[-3, 0, 2**40]], dtype=np.int64),
        "f16": np.array([[0.5, -1, 2]], dtype=np.float16),
        "f32": np.array([[0.5, -1, 2]], dtype=np.float32),
        "f64": np.array([[0.5, -1, 2]], dtype=np.float64),
        "bf16": bf16.view(torch.uint16).numpy(),  # BF16 travels as its 2-byte words
    }
    out = instance.execute(arrays, [f"OUT__{i}" for i in range(10)])
    expected = module(*[torch.from_numpy(a) if n != "bf16" else bf16 for n, a in arrays.items()])
    for i, value in enumerate(expected):
        got = out[f"OUT__{i}"]
        if value.dtype == torch.bfloat16:
            np.testing.assert_array_equal(got, value.view(torch.uint16).numpy())
        else:
            np.testing.assert_array_equal(got, value.numpy())
            assert got.dtype == value.numpy().dtype


@pytest.mark.parametrize("data_type", ["TYPE_UINT16", "TYPE_UINT32", "TYPE_UINT64"])
def test_datatypes_triton_refuses(make_model: ModelFactory, load_instance: Loader, data_type: str) -> None:
    config = config_text(tensor("x", data_type), tensor("OUTPUT__0", data_type))
    with pytest.raises(
        ModelConfigError, match=f"unsupported datatype {data_type} for input 'x' for model 'm_"
    ):
        load_instance(make_model(f"m_{data_type}", script(ToDouble()), config))


def test_read_only_inputs_are_copied_not_written(make_model: ModelFactory, load_instance: Loader) -> None:
    instance = load_instance(make_model("add_sub", script(AddSub()), ADD_SUB_CONFIG))
    x = np.frombuffer(fp32([1, 2, 3, 4]).tobytes(), dtype=np.float32).reshape(1, 4)  # as a decoded request
    assert not x.flags.writeable
    out = instance.execute({"x": x, "y": x}, ["OUTPUT__0"])
    np.testing.assert_array_equal(out["OUTPUT__0"], x * 2)


def test_an_output_index_the_result_lacks(make_model: ModelFactory, load_instance: Loader) -> None:
    outputs = ", ".join(tensor(f"OUTPUT__{i}") for i in range(3))
    instance = load_instance(
        make_model("list", script(TwoOfList()), config_text(tensor("x"), outputs, max_batch_size=2))
    )
    x = fp32([1, 2, 3, 4])
    out = instance.execute({"x": x}, ["OUTPUT__0", "OUTPUT__1"])
    np.testing.assert_array_equal(out["OUTPUT__1"], x + 2)
    with pytest.raises(
        BackendInvalidArgument,
        match=r"The output OUTPUT__2 in the model configuration refers to an output index which doesn't exist. "
        "This model has 2 outputs",
    ):
        instance.execute({"x": x}, ["OUTPUT__2"])


def test_an_output_dtype_the_config_does_not_say(make_model: ModelFactory, load_instance: Loader) -> None:
    instance = load_instance(make_model("double", script(ToDouble()), config_text(tensor("x"), tensor("y"))))
    with pytest.raises(
        BackendInvalidArgument,
        match="configuration expects datatype TYPE_FP32 for output 'y', model provides TYPE_FP64",
    ):
        instance.execute({"x": np.ones(4, dtype=np.float32)}, ["y"])


def test_scalar_outputs_and_outputs_without_the_batch(
    make_model: ModelFactory, load_instance: Loader
) -> None:
    instance = load_instance(
        make_model("total", script(Total()), config_text(tensor("x"), tensor("y", dims="[ 1 ]")))
    )
    with pytest.raises(BackendInvalidArgument, match=r"output 'y' is a scalar which is not supported\."):
        instance.execute({"x": np.ones(4, dtype=np.float32)}, ["y"])
    config = config_text(tensor("x"), tensor("y"), max_batch_size=4)
    instance = load_instance(make_model("first_row", script(FirstRow()), config))
    with pytest.raises(
        BackendInvalidArgument,
        match=r"output 'y' has shape \[4\]: .* its first dimension must be the batch size 3",
    ):
        instance.execute({"x": np.ones((3, 4), dtype=np.float32)}, ["y"])


def test_a_fault_in_forward_fails_the_batch(make_model: ModelFactory, load_instance: Loader) -> None:
    config = config_text(
        f"{tensor('x', dims='[ -1 ]')}, {tensor('y', dims='[ -1 ]')}", tensor("OUTPUT__0", dims="[ -1 ]")
    )
    instance = load_instance(make_model("add_sub", script(AddSub()), config))
    with pytest.raises(InternalError) as caught:
        instance.execute(
            {"x": np.ones(3, dtype=np.float32), "y": np.ones(2, dtype=np.float32)}, ["OUTPUT__0"]
        )
    assert str(caught.value).startswith("PyTorch execute failure: The following operation failed")
    assert "The size of tensor a (3) must match the size of tensor b (2)" in str(caught.value)


def test_an_optional_input_left_out(make_model: ModelFactory, load_instance: Loader) -> None:
    config = config_text(f"{tensor('x')}, {tensor('y', more='optional: true')}", tensor("OUTPUT__0"))
    instance = load_instance(make_model("add_sub", script(AddSub()), config))
    with pytest.raises(BackendInvalidArgument, match="input\\(s\\) 'y' of model 'add_sub' not given"):
        instance.execute({"x": np.ones(4, dtype=np.float32)}, ["OUTPUT__0"])


def test_optional_arguments_are_refused(make_model: ModelFactory, load_instance: Loader) -> None:
    config = config_text(f"{tensor('x')}, {tensor('bias')}", tensor("OUTPUT__0"))
    with pytest.raises(
        ModelConfigError, match="an input of type 'Optional\\[Tensor\\]' \\(forward\\(\\) argument 'bias'\\)"
    ):
        load_instance(make_model("optional", script(Optional2()), config))


def test_corrupt_model_file(make_model: ModelFactory, load_instance: Loader) -> None:
    model_dir = make_model("corrupt", None, ADD_SUB_CONFIG)
    (model_dir / "1" / "model.pt").write_bytes(b"not a zip archive")
    with pytest.raises(ModelConfigError) as caught:
        load_instance(model_dir)
    message = str(caught.value)
    assert "unable to load model 'corrupt' version 1: failed to load TorchScript file" in message
    assert "a model.pt must be a module saved with torch.jit.save" in message


def test_state_dict_is_not_torchscript(
    make_model: ModelFactory, load_instance: Loader, tmp_path: Path
) -> None:
    model_dir = make_model("weights", None, ADD_SUB_CONFIG)
    torch.save(torch.nn.Linear(2, 2).state_dict(), model_dir / "1" / "model.pt")
    with pytest.raises(ModelConfigError, match="failed to load TorchScript file"):
        load_instance(model_dir)


def test_missing_file_and_default_model_filename(make_model: ModelFactory, load_instance: Loader) -> None:
    with pytest.raises(ModelConfigError, match=r"model file '.*/missing/1/model\.pt' not found"):
        load_instance(make_model("missing", None, ADD_SUB_CONFIG))
    config = ADD_SUB_CONFIG + 'default_model_filename: "addsub.pt"'
    instance = load_instance(make_model("renamed", script(AddSub()), config, filename="addsub.pt"))
    assert (
        instance.execute({"x": fp32([1, 1, 1, 1]), "y": fp32([1, 1, 1, 1])}, ["OUTPUT__0"])["OUTPUT__0"].sum()
        == 8
    )


def test_weight_sharing(
    make_model: ModelFactory, load_instance: Loader, caplog: pytest.LogCaptureFixture
) -> None:
    extra = 'parameters { key: "ENABLE_WEIGHT_SHARING" value: { string_value: "true" } }'
    config = config_text(tensor("x"), tensor("y"), max_batch_size=2, extra=extra)
    model_dir = make_model("counter", script(Counter()), config)
    ctx = context(model_dir, total_instances=2)
    with caplog.at_level(logging.INFO):
        first, second = load_instance(model_dir, 0, ctx), load_instance(model_dir, 1, ctx)
    assert first.module is second.module
    assert "Reusing TorchScript model for instance 'counter_0_1'" in caplog.text
    x = fp32([0, 0, 0, 0])
    first.execute({"x": x}, ["y"])
    np.testing.assert_array_equal(second.execute({"x": x}, ["y"])["y"], x + 2)  # one module, counted twice
    key = next(iter(SHARED_MODULES._modules))
    first.close()
    assert SHARED_MODULES.held(key) == 1
    second.close()
    assert SHARED_MODULES.held(key) == 0


def test_without_weight_sharing_each_instance_has_its_module(
    make_model: ModelFactory, load_instance: Loader
) -> None:
    model_dir = make_model(
        "counter", script(Counter()), config_text(tensor("x"), tensor("y"), max_batch_size=2)
    )
    ctx = context(model_dir, total_instances=2)
    first, second = load_instance(model_dir, 0, ctx), load_instance(model_dir, 1, ctx)
    x = fp32([0, 0, 0, 0])
    first.execute({"x": x}, ["y"])
    np.testing.assert_array_equal(second.execute({"x": x}, ["y"])["y"], x + 1)


def test_execution_switches(
    make_model: ModelFactory, load_instance: Loader, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The torch-wide switches are recorded, not changed for the rest of the test run.
    calls: list[tuple[str, bool]] = []
    for setter in (
        "_jit_set_profiling_executor",
        "_jit_set_profiling_mode",
        "_jit_set_texpr_fuser_enabled",
        "_set_graph_executor_optimize",
    ):
        monkeypatch.setattr(
            torch._C, setter, lambda value, _name=setter: calls.append((_name, value)) or True
        )
    extra = " ".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}'
        for k, v in (
            ("INFERENCE_MODE", "false"),
            ("DISABLE_OPTIMIZED_EXECUTION", "true"),
            ("ENABLE_JIT_PROFILING", "false"),
            ("ENABLE_JIT_EXECUTOR", "false"),
            ("ENABLE_TENSOR_FUSER", "false"),
        )
    )
    instance = load_instance(make_model("add_sub", script(AddSub()), ADD_SUB_CONFIG + extra))
    calls.clear()
    out = instance.execute({"x": fp32([1, 2, 3, 4]), "y": fp32([1, 1, 1, 1])}, ["OUTPUT__0"])
    np.testing.assert_array_equal(out["OUTPUT__0"], fp32([2, 3, 4, 5]))
    assert ("_jit_set_profiling_executor", False) in calls
    assert ("_jit_set_profiling_mode", False) in calls
    assert ("_jit_set_texpr_fuser_enabled", False) in calls
    assert ("_set_graph_executor_optimize", False) in calls


def test_instances_run_with_their_models_thread_share(
    make_model: ModelFactory, load_instance: Loader
) -> None:
    model_dir = make_model("add_sub", script(AddSub()), ADD_SUB_CONFIG)
    instance = load_instance(model_dir, 0, context(model_dir, total_instances=4))
    seen: list[int] = []

    def run() -> None:
        instance.execute({"x": fp32([1, 2, 3, 4]), "y": fp32([1, 1, 1, 1])}, ["OUTPUT__0"])
        seen.append(torch.get_num_threads())

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    assert seen == [1]  # (cores - 1) // 4 instances, at least 1


def test_intra_op_thread_count_is_process_global(make_model: ModelFactory, load_instance: Loader) -> None:
    extra = 'parameters { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "3" } }'
    load_instance(make_model("first", script(AddSub()), ADD_SUB_CONFIG + extra))
    other = load_instance(make_model("other", script(AddSub()), ADD_SUB_CONFIG))
    other.execute({"x": fp32([1, 2, 3, 4]), "y": fp32([1, 1, 1, 1])}, ["OUTPUT__0"])
    assert torch.get_num_threads() == 3
