"""The PyTorch backend end to end: TorchScript models built at test time, served by one server, asked through
tritonclient over HTTP and gRPC, and answered as the modules themselves answer; an AOTInductor package compiled
in the background while the rest runs (once: later runs take it from what the tests build once, built_once.py),
loaded last."""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import ml_dtypes
import numpy as np
import pytest
import requests
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import built_once
from backends.pytorch.torch_test_models import (
    AddSub,
    DictIO,
    Identity10,
    RowSum,
    Scale,
    TwoOfList,
    Upper,
    load,
    save,
    script,
    trace,
)
from e2e import server_process
from e2e.clients import Api, failure
from e2e.server_process import LOAD_ALL_EXPLICITLY, RunningServer, running_server


@pytest.fixture(scope="module", autouse=True)
def frontend_processes() -> Iterator[int]:
    """The backend does not depend on the frontend mode: one server, single process."""
    server_process.frontend_processes = 0
    yield 0


def _tensor(name: str, data_type: str = "TYPE_FP32", dims: str = "[ 4 ]", more: str = "") -> str:
    return f'{{ name: "{name}" data_type: {data_type} dims: {dims} {more} }}'


def _params(**values: str) -> str:
    return " ".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in values.items()
    )


def _add(
    repo: Path,
    name: str,
    module: torch.jit.ScriptModule | None,
    inputs: str,
    outputs: str,
    *,
    max_batch_size: int = 0,
    extra: str = "",
    filename: str = "model.pt",
    platform: str = "pytorch_libtorch",
) -> None:
    if module is not None:
        save(module, repo / name / "1" / filename)
    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    (repo / name / "config.pbtxt").write_text(
        f'platform: "{platform}"\nmax_batch_size: {max_batch_size}\ninput [ {inputs} ]\noutput [ {outputs} ]\n{extra}\n'
    )


ADD_SUB_EXTRA = f"""
dynamic_batching {{ max_queue_delay_microseconds: 200000 }}
instance_group [ {{ count: 2 kind: KIND_CPU }} ]
model_warmup [ {{ name: "zeros" batch_size: 2 inputs {{ key: "x" value: {{ data_type: TYPE_FP32 dims: [ 4 ]
  zero_data: true }} }} inputs {{ key: "y" value: {{ data_type: TYPE_FP32 dims: [ 4 ] zero_data: true }} }} }} ]
{_params(ENABLE_WEIGHT_SHARING="true", INFERENCE_MODE="false", DISABLE_OPTIMIZED_EXECUTION="true")}
{_params(ENABLE_NVFUSER="true")}
"""
TYPES = ["BOOL", "UINT8", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BF16"]
TYPE_ARGS = ["b", "u8", "i8", "i16", "i32", "i64", "f16", "f32", "f64", "bf16"]

# Compiles a tiny model into an AOTInductor package (argv[1]): forward(x, y) -> (x + y, {"d": x * y}), with a
# batch dimension of 1 to 8 (backed_size_oblivious: torch.export would otherwise require at least 2).
AOTI_BUILD = """
import sys
import torch
import torch.fx.experimental._config as fx_config

class AddMul(torch.nn.Module):
    def forward(self, x, y):
        return x + y, {"d": x * y}

fx_config.backed_size_oblivious = True
batch = torch.export.Dim("batch", min=1, max=8)
program = torch.export.export(AddMul(), (torch.ones(2, 4), torch.ones(2, 4)), dynamic_shapes=({0: batch}, {0: batch}))
torch._inductor.aoti_compile_and_package(program, package_path=sys.argv[1])
"""


def build_repository(repo: Path) -> None:
    _add(
        repo,
        "pt_add_sub",
        script(AddSub()),
        f"{_tensor('y')}, {_tensor('x')}",  # forward(x, y): bound by name, in any order
        f"{_tensor('OUTPUT__1')}, {_tensor('OUTPUT__0')}",
        max_batch_size=8,
        extra=ADD_SUB_EXTRA,
    )
    _add(
        repo,
        "pt_scale",
        script(Scale()),
        f"{_tensor('INPUT__1', dims='[ -1 ]')}, {_tensor('INPUT__0', dims='[ -1 ]')}",
        _tensor("OUTPUT__0", dims="[ -1 ]"),
    )
    _add(
        repo,
        "pt_traced",
        trace(Scale(), torch.ones(1, 3), torch.ones(1, 3)),
        f"{_tensor('alpha', dims='[ 3 ]')}, {_tensor('beta', dims='[ 3 ]')}",
        _tensor("result", dims="[ 3 ]"),
        max_batch_size=4,
    )
    _add(
        repo,
        "pt_rowsum",
        script(RowSum()),
        _tensor("x", more="reshape: { shape: [ 2, 2 ] }"),
        _tensor("OUTPUT__0", dims="[ 2 ]"),
        max_batch_size=4,
    )
    _add(
        repo,
        "pt_dict",
        script(DictIO()),
        f"{_tensor('a')}, {_tensor('b')}",
        f"{_tensor('sum')}, {_tensor('prod')}",
    )
    one = "reshape: { shape: [ ] }"
    _add(
        repo,
        "pt_upper",
        script(Upper()),
        _tensor("words", "TYPE_STRING", "[ 1 ]", one),
        f"{_tensor('UPPER__0', 'TYPE_STRING', '[ 1 ]', one)}, {_tensor('LENGTH__1', 'TYPE_INT64', '[ 1 ]', one)}",
        max_batch_size=4,
        filename="upper.pt",
        extra='default_model_filename: "upper.pt"',
    )
    _add(
        repo,
        "pt_types",
        script(Identity10()),
        ", ".join(_tensor(n, f"TYPE_{t}", "[ 3 ]") for n, t in zip(TYPE_ARGS, TYPES, strict=True)),
        ", ".join(_tensor(f"OUT__{i}", f"TYPE_{t}", "[ 3 ]") for i, t in enumerate(TYPES)),
        max_batch_size=2,
    )
    outputs = ", ".join(_tensor(f"OUTPUT__{i}") for i in range(3))
    _add(repo, "pt_list", script(TwoOfList()), _tensor("x"), outputs, max_batch_size=2)
    # Models that cannot load: each leaves its reason, and the others serve.
    _add(repo, "pt_corrupt", None, _tensor("x"), _tensor("y"))
    (repo / "pt_corrupt" / "1" / "model.pt").write_bytes(b"this is not a TorchScript archive")
    _add(
        repo,
        "pt_gpu",
        script(Scale()),
        f"{_tensor('a')}, {_tensor('b')}",
        _tensor("y"),
        extra=("instance_group [ { kind: KIND_GPU } ]"),
    )
    _add(repo, "pt_mismatch", script(AddSub()), _tensor("x"), _tensor("OUTPUT__0"))
    _add(
        repo,
        "pt_bad_param",
        script(Scale()),
        f"{_tensor('a')}, {_tensor('b')}",
        _tensor("y"),
        extra=_params(INFERENCE_MODE="maybe"),
    )


@dataclass
class AotiBuild:
    """The AOTInductor package: kept from an earlier run (process None), or being compiled into `package`."""

    package: Path
    process: subprocess.Popen[bytes] | None
    cached: Path  # where a compiled package is kept for later runs

    def wait(self) -> str:
        """Empty once the package is there, else why it could not be compiled (the compiler's last lines)."""
        if self.process is None:
            return ""
        output, _ = self.process.communicate(timeout=300)
        if self.process.returncode != 0 or not self.package.is_file():
            return " | ".join(output.decode(errors="replace").strip().splitlines()[-3:])
        with built_once.building(self.cached) as folder:
            shutil.copy(self.package, folder / self.package.name)
        return ""


@pytest.fixture(scope="module")
def aoti_build(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AotiBuild]:
    """The AOTInductor compile, started first: it runs (10 to 40 s on 2 cores) while the other tests do. Once
    compiled, the package is kept for later runs of the same torch (built_once.py)."""
    versions = {"torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine()}
    cached = built_once.folder("aoti", {**versions, "build": AOTI_BUILD})
    if built_once.ready(cached):
        yield AotiBuild(cached / "model.pt2", None, cached)
        return
    package = tmp_path_factory.mktemp("aoti") / "model.pt2"
    process = subprocess.Popen(
        [sys.executable, "-c", AOTI_BUILD, str(package)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    yield AotiBuild(package, process, cached)
    if process.poll() is None:
        process.kill()
    process.communicate()


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("repo")
    build_repository(repo)
    return repo


@pytest.fixture(scope="module")
def server(
    repository: Path,
    aoti_build: AotiBuild,
    tmp_path_factory: pytest.TempPathFactory,
    frontend_processes: int,
) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("log") / "server.log"
    with running_server([repository], log, *LOAD_ALL_EXPLICITLY) as running:
        yield running


def _reference(repository: Path, model: str, filename: str = "model.pt") -> torch.jit.ScriptModule:
    return load(repository / model / "1" / filename)


def _index(server: RunningServer) -> dict[str, dict[str, str]]:
    rows = requests.post(f"http://{server.http_url}/v2/repository/index", timeout=10).json()
    return {row["name"]: row for row in rows}


def _infer(api: Api, model: str, arrays: dict[str, np.ndarray], outputs: list[str] | None = None) -> Any:
    requested = [api.module.InferRequestedOutput(name) for name in outputs] if outputs else None
    return api.client.infer(model, api.inputs(**arrays), outputs=requested)


def test_forward_argument_names(api: Api, repository: Path) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.full((3, 4), 0.5, dtype=np.float32)
    result = _infer(api, "pt_add_sub", {"y": y, "x": x})
    total, difference = _reference(repository, "pt_add_sub")(torch.from_numpy(x), torch.from_numpy(y))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), total.numpy())
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__1"), difference.numpy())


def test_dynamic_batching_of_a_torchscript_model(
    grpc_client: grpcclient.InferenceServerClient, http: httpclient.InferenceServerClient, repository: Path
) -> None:
    before = http.get_inference_statistics("pt_add_sub")["model_stats"][0]
    done = threading.Semaphore(0)
    answers: dict[int, Any] = {}

    def callback(row: int, result: Any, error: Any) -> None:
        answers[row] = error if error is not None else result
        done.release()

    rows = [np.full((1, 4), i, dtype=np.float32) for i in range(6)]
    for i, row in enumerate(rows):
        inputs = [grpcclient.InferInput("x", [1, 4], "FP32"), grpcclient.InferInput("y", [1, 4], "FP32")]
        inputs[0].set_data_from_numpy(row)
        inputs[1].set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
        grpc_client.async_infer(
            "pt_add_sub", inputs, callback=lambda result, error, i=i: callback(i, result, error)
        )
    for _ in rows:
        assert done.acquire(timeout=30)
    module = _reference(repository, "pt_add_sub")
    for i, row in enumerate(rows):
        total, _ = module(torch.from_numpy(row), torch.ones(1, 4))
        np.testing.assert_array_equal(answers[i].as_numpy("OUTPUT__0"), total.numpy())
    after = http.get_inference_statistics("pt_add_sub")["model_stats"][0]
    assert after["inference_count"] - before["inference_count"] == 6
    assert after["execution_count"] - before["execution_count"] < 6  # batched together


def test_weight_sharing_warmup_and_removed_parameter(server: RunningServer) -> None:
    log = server.log()
    assert "Reusing TorchScript model for instance 'pt_add_sub_0_1'" in log
    assert "model 'pt_add_sub': warmup sample 'zeros' ran on 2 instance(s)" in log
    assert "pytorch parameter 'ENABLE_NVFUSER' is no longer used" in log


def test_named_index_variable_dims_without_batching(api: Api, repository: Path) -> None:
    module = _reference(repository, "pt_scale")
    for length in (2, 5):
        a = np.arange(length, dtype=np.float32)
        b = np.full(length, 10, dtype=np.float32)
        result = _infer(api, "pt_scale", {"INPUT__1": b, "INPUT__0": a})
        np.testing.assert_array_equal(
            result.as_numpy("OUTPUT__0"), module(torch.from_numpy(a), torch.from_numpy(b))
        )


def test_traced_model_in_config_order(api: Api, repository: Path, server: RunningServer) -> None:
    alpha, beta = np.array([[1, 2, 3]], dtype=np.float32), np.array([[0, 0, 1]], dtype=np.float32)
    result = _infer(api, "pt_traced", {"beta": beta, "alpha": alpha})
    expected = _reference(repository, "pt_traced")(torch.from_numpy(alpha), torch.from_numpy(beta))
    np.testing.assert_array_equal(result.as_numpy("result"), expected.numpy())
    assert "Falling back to enforcing strict ordering from model configuration" in server.log()


def test_reshape(api: Api, repository: Path) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    result = _infer(api, "pt_rowsum", {"x": x})
    expected = _reference(repository, "pt_rowsum")(torch.from_numpy(x.reshape(2, 2, 2)))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), expected.numpy())


def test_dict_inputs_and_outputs(api: Api, repository: Path) -> None:
    a, b = np.array([1, 2, 3, 4], dtype=np.float32), np.array([2, 2, 2, 2], dtype=np.float32)
    result = _infer(api, "pt_dict", {"a": a, "b": b})
    expected = _reference(repository, "pt_dict")({"a": torch.from_numpy(a), "b": torch.from_numpy(b)})
    np.testing.assert_array_equal(result.as_numpy("sum"), expected["sum"].numpy())
    np.testing.assert_array_equal(result.as_numpy("prod"), expected["prod"].numpy())


def test_strings(api: Api, repository: Path) -> None:
    words = ["torch", "d\xe9j\xe0", ""]
    result = _infer(api, "pt_upper", {"words": np.array([[w.encode()] for w in words], dtype=object)})
    upper, lengths = _reference(repository, "pt_upper", "upper.pt")(words)
    assert result.as_numpy("UPPER__0").tolist() == [[w.encode()] for w in upper]
    assert result.as_numpy("LENGTH__1").tolist() == [[n] for n in lengths.tolist()]


def test_every_datatype(api: Api, repository: Path) -> None:
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
        "bf16": np.array([[1.5, -2, 3.25]], dtype=ml_dtypes.bfloat16),
    }
    result = _infer(api, "pt_types", arrays)
    tensors = [
        torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16) if n == "bf16" else torch.from_numpy(a)
        for n, a in arrays.items()
    ]
    for i, value in enumerate(_reference(repository, "pt_types")(*tensors)):
        got = result.as_numpy(f"OUT__{i}")
        if value.dtype == torch.bfloat16:
            np.testing.assert_array_equal(got.view(np.uint16), value.view(torch.uint16).numpy())
        else:
            np.testing.assert_array_equal(got, value.numpy())


def test_an_output_the_result_does_not_have(api: Api) -> None:
    x = np.ones((1, 4), dtype=np.float32)
    np.testing.assert_array_equal(
        _infer(api, "pt_list", {"x": x}, ["OUTPUT__1"]).as_numpy("OUTPUT__1"), x + 2
    )
    error = failure(lambda: _infer(api, "pt_list", {"x": x}, ["OUTPUT__2"]))
    assert error.status() == api.status(400, grpc.StatusCode.INVALID_ARGUMENT)
    assert (
        "The output OUTPUT__2 in the model configuration refers to an output index which doesn't exist. This "
        "model has 2 outputs" in str(error.message())
    )


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        ("pt_corrupt", "failed to load TorchScript file"),
        ("pt_gpu", "has kind KIND_GPU but no GPUs are available"),
        (
            "pt_mismatch",
            "unable to load model 'pt_mismatch', configuration expects 1 inputs, model provides 2",
        ),
        ("pt_bad_param", "parameter 'INFERENCE_MODE' must be 'true' or 'false', got 'maybe'"),
    ],
)
def test_models_that_cannot_load_leave_their_reason(
    server: RunningServer, http: httpclient.InferenceServerClient, model: str, reason: str
) -> None:
    row = _index(server)[model]
    assert row["state"] == "UNAVAILABLE"
    assert reason in row["reason"]
    assert http.is_model_ready("pt_scale")


def test_aoti_package(
    server: RunningServer,
    repository: Path,
    aoti_build: AotiBuild,
    http: httpclient.InferenceServerClient,
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    """Last: it waits for the background compile. Inputs by call-spec names, outputs by ordinal."""
    unavailable = aoti_build.wait()
    if unavailable:
        pytest.skip(f"AOTInductor compilation is unavailable here: {unavailable}")
    package = aoti_build.package
    for name, dims in (("pt_aoti", "[ 4 ]"), ("pt_aoti_wrong", "[ 5 ]"), ("pt_aoti_loose", "[ -1 ]")):
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "1" / "model.pt2").write_bytes(package.read_bytes())
        _add(
            repository,
            name,
            None,
            f"{_tensor('ARGS[1]', dims=dims)}, {_tensor('ARGS[0]', dims=dims)}",
            f"{_tensor('OUTPUT__1', dims=dims)}, {_tensor('OUTPUT__0', dims=dims)}",
            max_batch_size=8,
            platform="torch_aoti",
        )
    http.load_model("pt_aoti")
    compiled = torch._inductor.aoti_load_package(str(package))
    for rows in (1, 3):
        x = np.arange(4 * rows, dtype=np.float32).reshape(rows, 4)
        y = np.full((rows, 4), 2, dtype=np.float32)
        total, products = compiled(torch.from_numpy(x), torch.from_numpy(y))
        for api in (Api("http", httpclient, http), Api("grpc", grpcclient, grpc_client)):
            result = _infer(api, "pt_aoti", {"ARGS[0]": x, "ARGS[1]": y})
            np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), total.numpy())
            np.testing.assert_array_equal(result.as_numpy("OUTPUT__1"), products["d"].numpy())
    # A config the package contradicts: refused at load, by the probe of the package's own input checks.
    with pytest.raises(InferenceServerException) as refused:
        http.load_model("pt_aoti_wrong")
    assert (
        "input 'ARGS[0]': the model expects size 4 for dimension 1 (batch dimension included), the configuration "
        "gives 5" in str(refused.value.message())
    )
    assert http.is_model_ready("pt_aoti")
    # A config that leaves the size open loads; a request of a size the package refuses is a 400.
    http.load_model("pt_aoti_loose")
    wrong = np.ones((1, 5), dtype=np.float32)
    with pytest.raises(InferenceServerException) as caught:
        _infer(Api("http", httpclient, http), "pt_aoti_loose", {"ARGS[0]": wrong, "ARGS[1]": wrong})
    assert caught.value.status() == "400"
    assert "unmatched dim value at 1, expected: 4, but got: 5" in str(caught.value.message())
