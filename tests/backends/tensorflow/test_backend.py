"""Loading and running TensorFlow models as the server does, compared with TensorFlow's own results; the config
checked against the model at load; what is refused, with which message."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from modelhost.errors import BackendInvalidArgument, ModelConfigError

from .conftest import Loaded, ModelFactory
from .models import graphdef, grid, matmul, matmul_expected, parameters, tf, tf1_savedmodel, triples

Load = Callable[..., Loaded]
X = np.arange(6, dtype=np.float32).reshape(2, 3)
S = np.array([b"a", b"\x00\xff"], dtype=object)

GRAPH_CONFIG = """
platform: "tensorflow_graphdef"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 3 ] },
        { name: "S" data_type: TYPE_STRING dims: [ 1 ] reshape { shape: [] } } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] },
         { name: "T" data_type: TYPE_STRING dims: [ 1 ] reshape { shape: [] } } ]
"""


def _graph_model(make_model: ModelFactory, extra: str = "", variables: bool = False) -> Path:
    def build(path: Path) -> None:
        graphdef(path, variables=variables)

    build.__name__ = f"graphdef_{variables}"
    return make_model("g", build, GRAPH_CONFIG + extra, filename="model.graphdef")


def test_savedmodel_answers_as_tensorflow_does(make_model: ModelFactory, load: Load) -> None:
    loaded = load(make_model("mm", matmul))
    assert [i.name for i in loaded.instances] == ["mm_0", "mm_1"]
    out = loaded.instances[1].execute({"x": X, "s": S}, ["y", "t"])
    np.testing.assert_array_equal(out["y"], matmul_expected(X))
    assert out["y"].dtype == np.float32
    assert out["t"].tolist() == [b"aa", b"\x00\xff\x00\xff"]
    assert list(loaded.instances[0].execute({"x": X, "s": S}, ["y"])) == ["y"]


def test_tensorflow_1_savedmodel(make_model: ModelFactory, load: Load) -> None:
    # Its keys are no Python identifiers, which TensorFlow 2's eager loader refuses; a session takes them.
    loaded = load(make_model("v1", tf1_savedmodel))
    assert [io.name for io in loaded.config.input] == ["in"]
    np.testing.assert_array_equal(
        loaded.instances[0].execute({"in": X}, ["out-put"])["out-put"], matmul_expected(X)
    )


def test_each_instance_loads_its_own_model_by_default(make_model: ModelFactory, load: Load) -> None:
    first, second = load(make_model("mm", matmul)).instances
    assert first._runner is not second._runner


def test_max_session_share_count(make_model: ModelFactory, load: Load) -> None:
    extra = "instance_group [ { count: 3 kind: KIND_CPU } ]\n" + parameters(MAX_SESSION_SHARE_COUNT="2")
    first, second, third = load(make_model("mm", matmul, extra)).instances
    assert first._runner is second._runner
    assert third._runner is not first._runner
    first.close()
    np.testing.assert_array_equal(second.execute({"x": X, "s": S}, ["y"])["y"], matmul_expected(X))


def test_reshape(make_model: ModelFactory, load: Load) -> None:
    config = """
    max_batch_size: 8
    input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ]
    output [ { name: "flat" data_type: TYPE_FP32 dims: [ 4 ] },
             { name: "count" data_type: TYPE_INT64 dims: [ 1 ] reshape { shape: [] } } ]
    """
    loaded = load(make_model("g", grid, config))
    x = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    out = loaded.instances[0].execute({"x": x}, ["flat", "count"])
    np.testing.assert_array_equal(out["flat"], x.reshape(3, 4))
    np.testing.assert_array_equal(out["count"], [4, 4, 4])


def test_runtime_refusal_is_a_bad_request(make_model: ModelFactory, load: Load) -> None:
    instance = load(make_model("tr", triples)).instances[0]
    rows = instance.execute({"x": np.ones(6, np.float32)}, ["rows"])["rows"]
    np.testing.assert_array_equal(rows, np.ones((2, 3)))
    with pytest.raises(BackendInvalidArgument) as caught:
        instance.execute({"x": np.ones(4, np.float32)}, ["rows"])
    # TensorFlow's reason, without the graph location and stack trace it comes wrapped in.
    assert str(caught.value) == (
        "tensorflow error for model 'tr': Input to reshape is a tensor with 4 values, but the requested shape "
        "requires a multiple of 3"
    )


def test_a_signature_needs_every_input(make_model: ModelFactory, load: Load) -> None:
    instance = load(make_model("mm", matmul)).instances[0]
    with pytest.raises(BackendInvalidArgument, match=r"the TensorFlow signature needs input\(s\) \['s'\]"):
        instance.execute({"x": X}, ["y"])


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            'input [ { name: "x" data_type: TYPE_INT32 dims: [ 3 ] }, { name: "s" data_type: TYPE_STRING dims: [ 1 ] '
            "reshape { shape: [] } } ]",
            "configuration expects datatype TYPE_INT32 for input 'x', model provides TYPE_FP32",
        ),
        (
            'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "s" data_type: TYPE_STRING dims: [ 1 ] '
            "reshape { shape: [] } } ]",
            "tensor 'x': the model expects 2 dimensions (shape [-1,3]) but the model configuration specifies",
        ),
        (
            'input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] } ]',
            "model input(s) ['s'] are missing from the configuration",
        ),
        (
            'input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] }, '
            '{ name: "z" data_type: TYPE_STRING dims: [ 1 ] } ]',
            "configuration expects input 'z' but the model has only ['s', 'x']",
        ),
        (
            # Outputs compare exactly, as in Triton: -1 where the signature says 1 is refused.
            'output [ { name: "y" data_type: TYPE_FP32 dims: [ -1 ] } ]',
            "tensor 'y': the model expects 2 dimensions (shape [-1,1])",
        ),
    ],
    ids=["datatype", "dims", "missing-input", "unknown-input", "output-wildcard"],
)
def test_config_contradicting_the_signature(
    make_model: ModelFactory, load: Load, config: str, message: str
) -> None:
    with pytest.raises(ModelConfigError) as caught:
        load(make_model("mm", matmul, "max_batch_size: 4\n" + config))
    assert message in str(caught.value)


def test_kind_gpu_without_a_gpu_build(make_model: ModelFactory, load: Load) -> None:
    model_dir = make_model("mm", matmul, "instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]")
    with pytest.raises(ModelConfigError, match="KIND_GPU needs a TensorFlow build with GPU support"):
        load(model_dir, gpu_count=1)


def test_cpu_execution_accelerator(make_model: ModelFactory, load: Load) -> None:
    extra = 'optimization { execution_accelerators { cpu_execution_accelerator [ { name: "openvino" } ] } }'
    with pytest.raises(
        ModelConfigError, match="CPU Execution Accelerator is not supported in TensorFlow backend"
    ):
        load(make_model("mm", matmul, extra))


def test_only_tensorflow_2(make_model: ModelFactory, load: Load) -> None:
    with pytest.raises(
        ModelConfigError, match="version=1 is not supported: the tensorflow backend runs TensorFlow 2"
    ):
        load(make_model("mm", matmul), backend_config={"version": "1"})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("TF_NUM_INTRA_THREADS", "-1", "parameter 'TF_NUM_INTRA_THREADS' must be >= 0, got -1"),
        ("TF_NUM_INTER_THREADS", "two", "parameter 'TF_NUM_INTER_THREADS' must be an integer, got 'two'"),
        ("MAX_SESSION_SHARE_COUNT", "0", "parameter 'MAX_SESSION_SHARE_COUNT' must be >= 1, got 0"),
        (
            "TF_USE_PER_SESSION_THREADS",
            "maybe",
            "parameter 'TF_USE_PER_SESSION_THREADS' must be 'true' or 'false'",
        ),
        ("TF_SIGNATURE_DEF", "nope", "the SavedModel has no signature 'nope' (parameter TF_SIGNATURE_DEF)"),
        ("TF_GRAPH_TAG", "gpu", "the SavedModel has no MetaGraph tagged 'gpu' (parameter TF_GRAPH_TAG)"),
    ],
)
def test_bad_parameters(make_model: ModelFactory, load: Load, key: str, value: str, message: str) -> None:
    text = 'max_batch_size: 4 input [ { name: "x" } , { name: "s" } ] output [ { name: "y" } ]\n'
    with pytest.raises(ModelConfigError) as caught:
        load(make_model("mm", matmul, text + parameters(**{key: value})))
    assert message in str(caught.value)


def test_init_ops_of_a_savedmodel_are_ignored(
    make_model: ModelFactory, load: Load, caplog: pytest.LogCaptureFixture
) -> None:
    extra = parameters(TF_USE_PER_SESSION_THREADS="yes", TF_INIT_OPS_FILE="init.json")
    with caplog.at_level(logging.WARNING):
        instance = load(make_model("mm", matmul, extra)).instances[0]
    assert "parameter 'TF_INIT_OPS_FILE' is ignored for a SavedModel" in caplog.text
    assert "TF_USE_PER_SESSION_THREADS" not in caplog.text  # its session takes it
    np.testing.assert_array_equal(instance.execute({"x": X, "s": S}, ["y"])["y"], matmul_expected(X))


def test_graphdef(make_model: ModelFactory, load: Load) -> None:
    loaded = load(_graph_model(make_model))
    out = loaded.instances[0].execute({"INPUT": X, "S": S}, ["OUTPUT", "T"])
    np.testing.assert_array_equal(out["OUTPUT"], matmul_expected(X))
    assert out["T"].tolist() == [b"aa", b"\x00\xff\x00\xff"]
    assert loaded.instances[1].execute({"INPUT": X, "S": S}, ["T"])["T"].tolist() == out["T"].tolist()


def test_graphdef_variables_and_init_ops(make_model: ModelFactory, load: Load) -> None:
    model_dir = _graph_model(make_model, parameters(TF_INIT_OPS_FILE="init_ops.json"), variables=True)
    (model_dir / "init_ops.json").write_text(json.dumps({"init_ops": ["init"]}))
    instance = load(model_dir).instances[0]
    np.testing.assert_array_equal(
        instance.execute({"INPUT": X, "S": S}, ["OUTPUT"])["OUTPUT"], matmul_expected(X)
    )


@pytest.mark.parametrize(
    ("extra", "init_ops", "message"),
    [
        (parameters(TF_INIT_OPS_FILE="absent.json"), None, "TF_INIT_OPS_FILE 'absent.json' is in neither"),
        (
            parameters(TF_INIT_OPS_FILE="i.json"),
            {"init_ops": ["nope"]},
            "TF_INIT_OPS_FILE names an operation",
        ),
        (parameters(TF_INIT_OPS_FILE="i.json"), {"ops": []}, "must be a JSON object with a list 'init_ops'"),
    ],
    ids=["no-file", "unknown-op", "bad-json"],
)
def test_graphdef_bad_init_ops(
    make_model: ModelFactory, load: Load, extra: str, init_ops: dict[str, list[str]] | None, message: str
) -> None:
    model_dir = _graph_model(make_model, extra, variables=True)
    if init_ops is not None:
        (model_dir / "1" / "i.json").write_text(json.dumps(init_ops))
    with pytest.raises(ModelConfigError, match=message):
        load(model_dir)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'name: "OUTPUT"',
            'name: "NOPE"',
            "configuration expects output 'NOPE' but the graph has no such node",
        ),
        (
            'name: "INPUT"',
            'name: "w"',
            "configuration expects input 'w' but the model has only ['INPUT', 'S']",
        ),
        ('name: "INPUT" data_type: TYPE_FP32', 'name: "INPUT" data_type: TYPE_FP64', "datatype TYPE_FP64"),
        (
            '{ name: "INPUT" data_type: TYPE_FP32 dims: [ 3 ] },',
            "",
            "output 'OUTPUT' needs Placeholder(s) ['INPUT'], which the configuration does not list as inputs",
        ),
    ],
    ids=["unknown-output", "not-a-placeholder", "datatype", "unlisted-placeholder"],
)
def test_graphdef_config_against_the_graph(
    make_model: ModelFactory, load: Load, old: str, new: str, message: str
) -> None:
    model_dir = _graph_model(make_model)
    config = model_dir / "config.pbtxt"
    text = config.read_text()
    assert old in text
    config.write_text(text.replace(old, new, 1))
    with pytest.raises(ModelConfigError) as caught:
        load(model_dir)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "model g has an empty network"),
        (b"\x0a\xff\xff garbage", "unable to load model 'g': failed to read GraphDef"),
    ],
    ids=["empty", "corrupt"],
)
def test_bad_graphdef(make_model: ModelFactory, load: Load, content: bytes, message: str) -> None:
    model_dir = _graph_model(make_model)
    (model_dir / "1" / "model.graphdef").write_bytes(content)
    with pytest.raises(ModelConfigError, match=message):
        load(model_dir)


def test_corrupt_variables(make_model: ModelFactory, load: Load) -> None:
    model_dir = make_model("mm", matmul)
    for path in (model_dir / "1" / "model.savedmodel" / "variables").iterdir():
        path.write_bytes(b"garbage")
    with pytest.raises(ModelConfigError, match="unable to load model 'mm': "):
        load(model_dir)


def test_tensorflow_is_the_one_imported(make_model: ModelFactory, load: Load) -> None:
    # The runner and this test use the same TensorFlow: results from the server's path match a direct call.
    loaded = load(make_model("mm", matmul))
    direct = tf.saved_model.load(str(loaded.model_dir / "1" / "model.savedmodel")).signatures[
        "serving_default"
    ]
    expected = direct(x=tf.constant(X), s=tf.constant(S))["y"].numpy()
    np.testing.assert_array_equal(loaded.instances[0].execute({"x": X, "s": S}, ["y"])["y"], expected)


def test_graphdef_sessions_are_independent(
    make_model: ModelFactory, load: Load, caplog: pytest.LogCaptureFixture
) -> None:
    extra = parameters(TF_INIT_OPS_FILE="init_ops.json", TF_USE_PER_SESSION_THREADS="true")
    model_dir = _graph_model(make_model, extra, variables=True)
    (model_dir / "init_ops.json").write_text(json.dumps({"init_ops": ["init"]}))
    with caplog.at_level(logging.WARNING):
        first, second = load(model_dir).instances
    assert "TF_USE_PER_SESSION_THREADS" not in caplog.text  # a session takes it
    assert first._runner is not second._runner
    first.close()  # closes its session and frees its variables; the other's are its own
    np.testing.assert_array_equal(
        second.execute({"INPUT": X, "S": S}, ["OUTPUT"])["OUTPUT"], matmul_expected(X)
    )


@pytest.mark.parametrize("level", [-1, 1])
def test_graph_level_sets_xla_jit(make_model: ModelFactory, load: Load, level: int) -> None:
    # Triton's mapping of optimization.graph.level to the session's global JIT level (-1 off, 1 on).
    instance = load(make_model("mm", matmul, f"optimization {{ graph {{ level: {level} }} }}")).instances[0]
    config = instance._runner._session._config
    expected = {-1: tf.compat.v1.OptimizerOptions.OFF, 1: tf.compat.v1.OptimizerOptions.ON_1}[level]
    assert config.graph_options.optimizer_options.global_jit_level == expected
    np.testing.assert_array_equal(instance.execute({"x": X, "s": S}, ["y"])["y"], matmul_expected(X))
