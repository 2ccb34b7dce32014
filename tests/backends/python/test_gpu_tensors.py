"""GPU tensors in pb_utils on a host without a GPU: the Tensor's behaviour with a stand-in framework whose "CUDA"
tensors live in host memory, DLPack devices read from capsules, the refusals, and FORCE_CPU_ONLY_INPUT_TENSORS.
The real thing (torch on CUDA, through a server) is tests/e2e/test_gpu_python_tensors.py, marked `gpu`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch
from google.protobuf import text_format  # type: ignore[import-untyped]
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.backends.python import gpu_tensors, pb_utils
from modelhost.backends.python.instance import input_device
from modelhost.backends.python.pb_utils.tensors import _Capsule
from modelhost.errors import ModelConfigError


class DeviceTensor:
    """A "CUDA" tensor of the stand-in framework: a host array that says it is on cuda:<device_id>."""

    def __init__(self, array: npt.NDArray[Any], device_id: int = 0) -> None:
        self.array = array
        self.device_id = device_id
        self.shape = array.shape

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self.array.__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (gpu_tensors.KDL_CUDA, self.device_id)

    def is_contiguous(self) -> bool:
        return bool(self.array.flags.c_contiguous)


class StandIn:
    name = "stand-in"

    def holds(self, obj: Any) -> bool:
        return isinstance(obj, DeviceTensor)

    def from_dlpack(self, obj: Any) -> Any:
        raise TypeError("the stand-in takes only its own tensors")

    def to_host(self, tensor: Any) -> npt.NDArray[Any]:
        return np.array(tensor.array)

    def to_device(self, array: npt.NDArray[Any], device_id: int) -> Any:
        return DeviceTensor(np.array(array), device_id)

    def dtype(self, tensor: Any) -> np.dtype[Any]:
        return np.dtype(tensor.array.dtype)


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[StandIn]:
    framework = StandIn()
    monkeypatch.setattr(gpu_tensors, "_framework", framework)
    yield framework


def test_a_cuda_tensor_is_held_not_copied(stand_in: StandIn) -> None:
    device = DeviceTensor(np.arange(6, dtype=np.float32).reshape(2, 3), device_id=1)
    tensor = pb_utils.Tensor.from_dlpack("t", device)
    assert tensor.is_cpu() is False
    assert tensor.shape() == [2, 3]
    assert tensor.triton_dtype() == 11
    assert tensor.__dlpack_device__() == (gpu_tensors.KDL_CUDA, 1)
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Tensor is stored in GPU and cannot be converted"
    ):
        tensor.as_numpy()
    # to_dlpack() exports the framework tensor's own memory (here a host array, so numpy can look at it).
    assert np.shares_memory(np.from_dlpack(_Capsule(tensor.to_dlpack())), device.array)
    np.testing.assert_array_equal(tensor._host_array(), device.array)  # what crosses to the server
    assert "cuda:1" in repr(tensor)


def test_tensors_are_put_on_a_gpu_where_asked(stand_in: StandIn) -> None:
    on_gpu = pb_utils.Tensor._to_gpu("x", np.array([1, 2], dtype=np.int32), 0)
    assert not on_gpu.is_cpu() and on_gpu.triton_dtype() == 8
    np.testing.assert_array_equal(on_gpu._host_array(), [1, 2])
    text = pb_utils.Tensor._to_gpu("s", np.array([b"a"], dtype=np.object_), 0)
    assert text.is_cpu()  # BYTES stay on the host, as in Triton


def test_a_tensor_the_framework_cannot_take_is_refused(stand_in: StandIn) -> None:
    class Foreign:
        def __dlpack__(self, stream: Any = None) -> Any:
            raise AssertionError("not consumed")

        def __dlpack_device__(self) -> tuple[int, int]:
            return (gpu_tensors.KDL_CUDA, 0)

    with pytest.raises(pb_utils.TritonModelException, match=r"not supported by stand-in"):
        pb_utils.Tensor.from_dlpack("t", Foreign())
    strided = DeviceTensor(np.zeros((3, 2), dtype=np.float32).T)
    with pytest.raises(pb_utils.TritonModelException, match=r"not contiguous"):
        pb_utils.Tensor.from_dlpack("t", strided)


def test_other_devices_are_refused() -> None:
    class Metal:
        def __dlpack__(self, stream: Any = None) -> Any:
            raise AssertionError("not consumed")

        def __dlpack_device__(self) -> tuple[int, int]:
            return (8, 0)  # kDLMetal

    with pytest.raises(
        pb_utils.TritonModelException, match=r"^DLDevice type 8 is not support by Python backend"
    ):
        pb_utils.Tensor.from_dlpack("t", Metal())


def test_without_torch_or_cupy_gpu_tensors_say_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> Any:
        raise ImportError(name)

    monkeypatch.setattr(gpu_tensors, "_framework", None)
    monkeypatch.setattr(gpu_tensors.importlib, "import_module", missing)
    with pytest.raises(pb_utils.TritonModelException, match=r"need torch or cupy"):
        pb_utils.Tensor.from_dlpack("t", DeviceTensor(np.zeros(2)))


def test_capsule_device_is_read_without_consuming_the_capsule() -> None:
    array = np.arange(4, dtype=np.int16)
    capsule = array.__dlpack__()
    assert gpu_tensors.capsule_device(capsule) == (gpu_tensors.KDL_CPU, 0)
    tensor = pb_utils.Tensor.from_dlpack("t", capsule)  # still usable after the look
    assert np.shares_memory(tensor.as_numpy(), array)
    with pytest.raises(pb_utils.TritonModelException, match=r"already used"):
        pb_utils.Tensor.from_dlpack("t", capsule)


def test_torch_is_the_framework_where_the_stub_has_it() -> None:
    framework = gpu_tensors.framework()
    assert framework.name == "torch"
    cpu = torch.arange(3, dtype=torch.int64)
    assert framework.holds(cpu) and gpu_tensors.hold(cpu) is cpu
    assert framework.dtype(cpu) == np.int64
    np.testing.assert_array_equal(framework.to_host(cpu), [0, 1, 2])
    assert gpu_tensors.is_contiguous(cpu) and not gpu_tensors.is_contiguous(torch.zeros(2, 3).t())


def _config(text: str) -> Any:
    return text_format.Parse('name: "m" backend: "python" ' + text, ModelConfig())


@pytest.mark.parametrize(
    ("parameter", "kind", "expected"),
    [
        ("", "KIND_GPU", None),  # the default: every input on the host
        ("yes", "KIND_GPU", None),
        ("no", "KIND_GPU", 3),  # on the instance's GPU
        ("no", "KIND_CPU", None),
    ],
)
def test_force_cpu_only_input_tensors(parameter: str, kind: str, expected: int | None) -> None:
    text = f'parameters {{ key: "FORCE_CPU_ONLY_INPUT_TENSORS" value: {{ string_value: "{parameter}" }} }}'
    assert input_device(_config(text if parameter else ""), kind, 3) == expected


def test_force_cpu_only_input_tensors_takes_yes_or_no() -> None:
    text = 'parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value: { string_value: "maybe" } }'
    with pytest.raises(ModelConfigError) as caught:
        input_device(_config(text), "KIND_GPU", 0)
    assert str(caught.value) == (
        "unable to load model 'm': Incorrect value for FORCE_CPU_ONLY_INPUT_TENSORS: 'maybe' (it can be 'yes' or "
        "'no')"
    )
