"""The GPU executor's own logic (buffers sized for the profiles, shapes set, addresses bound, outputs copied back,
data-dependent outputs through an output allocator, cleanup) on a fake TensorRT engine and a fake CUDA runtime
whose "device memory" is host memory, so that the copies really move bytes. The real GPU path is run by
test_trt_gpu.py (marked `gpu`) on a machine with a GPU."""

from __future__ import annotations

import ctypes
import importlib.util
from typing import Any

import numpy as np
import pytest
from trt_fakes import engine, output

from modelhost.backends.tensorrt import cuda
from modelhost.backends.tensorrt.engine import EngineDescription, EngineTensor, ProfileShapes
from modelhost.backends.tensorrt.executor import GpuExecutor
from modelhost.backends.tensorrt.settings import TensorRTSettings
from modelhost.errors import BackendInvalidArgument, ModelConfigError


class FakeStream:
    count = 0

    def __init__(self, priority: int) -> None:
        FakeStream.count += 1
        self.id, self.priority, self.destroyed = FakeStream.count, priority, False

    def __int__(self) -> int:
        return 0x5000 + self.id


class FakeCudart:
    """cuda.bindings.runtime's calling convention: every call returns (error, *values)."""

    class cudaError_t:
        cudaSuccess = 0
        cudaErrorNoDevice = 100

    class cudaDeviceAttr:
        cudaDevAttrComputeCapabilityMajor = "major"
        cudaDevAttrComputeCapabilityMinor = "minor"

    class cudaMemcpyKind:
        cudaMemcpyHostToDevice = "h2d"
        cudaMemcpyDeviceToHost = "d2h"

    cudaStreamNonBlocking = 1

    def __init__(self) -> None:
        self.blocks: dict[int, Any] = {}
        self.mallocs: list[int] = []
        self.devices: list[int] = []
        self.streams: list[FakeStream] = []
        self.syncs = 0

    def cudaGetErrorName(self, error: int) -> tuple[int, bytes]:
        return 0, b"cudaErrorMemoryAllocation"

    def cudaGetErrorString(self, error: int) -> tuple[int, bytes]:
        return 0, b"out of memory"

    def cudaGetDeviceCount(self) -> tuple[int, int]:
        return 0, 1

    def cudaSetDevice(self, device: int) -> tuple[int]:
        self.devices.append(device)
        return (0,)

    def cudaDeviceGetAttribute(self, attribute: str, device: int) -> tuple[int, int]:
        return 0, 8 if attribute == "major" else 6

    def cudaDeviceGetStreamPriorityRange(self) -> tuple[int, int, int]:
        return 0, 0, -5

    def cudaStreamCreateWithPriority(self, flags: int, priority: int) -> tuple[int, FakeStream]:
        stream = FakeStream(priority)
        self.streams.append(stream)
        return 0, stream

    def cudaStreamSynchronize(self, stream: FakeStream) -> tuple[int]:
        self.syncs += 1
        return (0,)

    def cudaStreamDestroy(self, stream: FakeStream) -> tuple[int]:
        stream.destroyed = True
        return (0,)

    def cudaMalloc(self, nbytes: int) -> tuple[int, int]:
        if nbytes > 1 << 20:
            return 2, 0
        block = ctypes.create_string_buffer(nbytes)
        self.blocks[ctypes.addressof(block)] = block
        self.mallocs.append(nbytes)
        return 0, ctypes.addressof(block)

    def cudaFree(self, address: int) -> tuple[int]:
        del self.blocks[address]
        return (0,)

    def cudaMemcpyAsync(self, dst: int, src: int, nbytes: int, kind: str, stream: FakeStream) -> tuple[int]:
        ctypes.memmove(dst, src, nbytes)
        return (0,)


def _read(address: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.frombuffer((ctypes.c_char * nbytes).from_address(address), dtype=dtype).reshape(shape).copy()


def _write(address: int, array: np.ndarray) -> None:
    ctypes.memmove(address, array.ctypes.data, array.nbytes)


class FakeTrt:
    __version__ = "10.3.0"

    class ExecutionContextAllocationStrategy:
        STATIC = "kSTATIC"
        ON_PROFILE_CHANGE = "kON_PROFILE_CHANGE"

    class IOutputAllocator:
        def __init__(self) -> None:
            pass


class FakeContext:
    """y = 2 * x[:, :2]; idx = the flat indices of x's positive elements (a data-dependent shape)."""

    def __init__(self, strategy: str, max_batch: int) -> None:
        self.strategy = strategy
        self.max_batch = max_batch
        self.profile = 0
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}
        self.allocators: dict[str, Any] = {}

    def set_optimization_profile_async(self, profile: int, stream: int) -> bool:
        self.profile = profile
        return True

    def set_input_shape(self, name: str, shape: tuple[int, ...]) -> bool:
        if shape[0] > self.max_batch:
            return False
        self.shapes[name] = tuple(shape)
        return True

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return {"y": (self.shapes["x"][0], 2), "idx": (-1,)}[name]

    def set_tensor_address(self, name: str, address: int) -> bool:
        self.addresses[name] = address
        return True

    def set_output_allocator(self, name: str, allocator: Any) -> bool:
        self.allocators[name] = allocator
        return True

    def execute_async_v3(self, stream: int) -> bool:
        x = _read(self.addresses["x"], self.shapes["x"], np.float32)
        _write(self.addresses["y"], np.ascontiguousarray(x[:, :2] * 2))
        idx = np.flatnonzero(x.ravel() > 0).astype(np.int64)
        allocator = self.allocators["idx"]
        address = allocator.reallocate_output_async("idx", 0, idx.nbytes, 256, stream)
        _write(address, idx)
        allocator.notify_shape("idx", (len(idx),))
        return True


class FakeEngine:
    def __init__(self, max_batch: int = 8) -> None:
        self.max_batch = max_batch
        self.contexts: list[FakeContext] = []

    def create_execution_context(self, strategy: str) -> FakeContext:
        context = FakeContext(strategy, self.max_batch)
        self.contexts.append(context)
        return context


def _description() -> EngineDescription:
    profiles = (ProfileShapes((1, 3), (4, 3), (8, 3)), ProfileShapes((1, 3), (2, 3), (2, 3)))
    return engine(
        EngineTensor("x", True, "FLOAT", (-1, 3), profiles),
        output("y", (-1, 2)),
        output("idx", (-1,), "INT64"),
        num_profiles=2,
    )


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> FakeCudart:
    runtime = FakeCudart()
    monkeypatch.setattr(cuda, "cudart", lambda: runtime)
    return runtime


def _executor(
    profiles: list[int] | None = None, settings: TensorRTSettings | None = None, max_batch_size: int = 8
) -> tuple[GpuExecutor, FakeEngine]:
    trt_engine = FakeEngine()
    executor = GpuExecutor(
        FakeTrt,
        trt_engine,
        _description(),
        profiles or [0],
        settings or TensorRTSettings(),
        1,
        max_batch_size,
    )
    return executor, trt_engine


def test_a_batch_runs_and_its_outputs_come_back(fake_cuda: FakeCudart) -> None:
    executor, _ = _executor()
    x = np.array([[1, -2, 3], [-4, 5, 6]], dtype=np.float32)
    out = executor.run(0, {"x": x}, ["y", "idx"])
    np.testing.assert_array_equal(out["y"], x[:, :2] * 2)
    np.testing.assert_array_equal(out["idx"], [0, 2, 4, 5])
    assert out["idx"].dtype == np.int64
    assert set(fake_cuda.devices) == {1}


def test_buffers_are_sized_at_load_for_the_profiles_largest_batch(fake_cuda: FakeCudart) -> None:
    _executor(max_batch_size=8)
    assert sorted(fake_cuda.mallocs) == [8 * 2 * 4, 8 * 3 * 4]  # y and x; idx's size is known only when run
    fake_cuda.mallocs.clear()
    _executor(max_batch_size=4)
    assert sorted(fake_cuda.mallocs) == [
        4 * 2 * 4,
        4 * 3 * 4,
    ]  # capped at the config's max batch, as Triton does


def test_batches_reuse_the_buffers(fake_cuda: FakeCudart) -> None:
    executor, _ = _executor()
    loaded = len(fake_cuda.mallocs)
    for batch in (8, 1, 3, 8):
        executor.run(0, {"x": np.ones((batch, 3), dtype=np.float32)}, ["y"])
    assert fake_cuda.mallocs[loaded:] == [8 * 3 * 8]  # only the data-dependent output's, at its first run


def test_each_profile_gets_its_context_the_strategy_and_the_stream_its_priority(
    fake_cuda: FakeCudart,
) -> None:
    executor, trt_engine = _executor(
        profiles=[0, 1], settings=TensorRTSettings(allocation_strategy="ON_PROFILE_CHANGE", priority="MAX")
    )
    assert [c.profile for c in trt_engine.contexts] == [0, 1]
    assert {c.strategy for c in trt_engine.contexts} == {"kON_PROFILE_CHANGE"}
    assert fake_cuda.streams[-1].priority == -5
    executor.run(1, {"x": np.ones((2, 3), dtype=np.float32)}, ["y"])
    assert trt_engine.contexts[1].shapes["x"] == (2, 3)


def test_a_shape_tensorrt_refuses_is_a_400(fake_cuda: FakeCudart) -> None:
    executor, _ = _executor()
    with pytest.raises(BackendInvalidArgument, match=r"TensorRT refused shape \[9, 3\] for input 'x'"):
        executor.run(0, {"x": np.ones((9, 3), dtype=np.float32)}, ["y"])


def test_inputs_are_converted_to_the_engines_type(fake_cuda: FakeCudart) -> None:
    executor, _ = _executor()
    out = executor.run(0, {"x": np.array([[1, 2, 3]], dtype=np.float64)}, ["y"])
    np.testing.assert_array_equal(out["y"], [[2, 4]])


def test_close_frees_everything_once(fake_cuda: FakeCudart) -> None:
    executor, _ = _executor()
    executor.run(0, {"x": np.ones((1, 3), dtype=np.float32)}, ["idx"])
    executor.close()
    executor.close()
    assert fake_cuda.blocks == {}
    assert fake_cuda.streams[-1].destroyed


def test_a_failed_allocation_at_load_releases_what_was_made(fake_cuda: FakeCudart) -> None:
    big = engine(
        EngineTensor("x", True, "FLOAT", (-1, 3), (ProfileShapes((1, 3), (8, 3), (1 << 20, 3)),)),
        output("y", (-1, 2)),
    )
    with pytest.raises(cuda.CudaError, match="cudaErrorMemoryAllocation: out of memory"):
        GpuExecutor(FakeTrt, FakeEngine(max_batch=1 << 20), big, [0], TensorRTSettings(), 0, 0)
    assert fake_cuda.blocks == {}
    assert fake_cuda.streams[-1].destroyed


def test_cuda_helpers(fake_cuda: FakeCudart) -> None:
    assert cuda.device_count() == 1
    assert cuda.compute_capability(0) == "8.6"
    assert (cuda.stream_priority("MAX"), cuda.stream_priority("MIN"), cuda.stream_priority("DEFAULT")) == (
        -5,
        0,
        0,
    )


def test_without_cuda_bindings_the_package_to_install_is_named() -> None:
    if importlib.util.find_spec("cuda") is not None and importlib.util.find_spec("cuda.bindings") is not None:
        pytest.skip("cuda-bindings is installed here")
    with pytest.raises(
        ModelConfigError, match=r"needs the Python package 'cuda-bindings'.*modelhost\[tensorrt\]"
    ):
        cuda.cudart()
