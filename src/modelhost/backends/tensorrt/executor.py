"""Running batches on the GPU with TensorRT 10's name-based API (also TensorRT 11's).

Per instance: a CUDA stream, one IExecutionContext per optimization profile (created with the model's
`execution_context_allocation_strategy`), and one device buffer per engine tensor, sized at load for the
largest batch the profiles allow (so that a model that does not fit fails its load, not its first request) and
grown if a batch ever needs more. A batch: `set_input_shape` + copy in + `set_tensor_address` per input,
addresses for every output (an IOutputAllocator for outputs whose shape depends on the data),
`execute_async_v3` on the stream, copies out, one stream synchronize.

The `tensorrt` module comes in as an argument from adapter.py, the only module that imports it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from modelhost.backends.api import Arrays
from modelhost.backends.tensorrt import cuda
from modelhost.backends.tensorrt.engine import TRT_ITEMSIZE, EngineDescription, EngineTensor, Shape
from modelhost.backends.tensorrt.settings import TensorRTSettings
from modelhost.errors import BackendInvalidArgument, InternalError

log = logging.getLogger(__name__)

# TensorRT type name -> the numpy dtype the server hands over (BF16 as raw 16-bit words).
_NUMPY: dict[str, np.dtype[Any]] = {
    "FLOAT": np.dtype(np.float32),
    "HALF": np.dtype(np.float16),
    "BF16": np.dtype(np.uint16),
    "INT8": np.dtype(np.int8),
    "UINT8": np.dtype(np.uint8),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "BOOL": np.dtype(np.bool_),
}


def output_allocator_class(trt: Any) -> type:
    """An IOutputAllocator for outputs whose shape TensorRT knows only while running (data-dependent)."""

    class OutputAllocator(trt.IOutputAllocator):  # type: ignore[misc]  # trt is untyped
        def __init__(self) -> None:
            trt.IOutputAllocator.__init__(self)
            self.buffer = cuda.DeviceBuffer()
            self.shape: Shape = ()

        def reallocate_output(self, tensor_name: str, memory: int, size: int, alignment: int) -> int:
            return self.buffer.ensure(size)  # cudaMalloc aligns to 256 bytes, more than TensorRT asks

        def reallocate_output_async(
            self, tensor_name: str, memory: int, size: int, alignment: int, stream: int
        ) -> int:
            return self.buffer.ensure(size)

        def notify_shape(self, tensor_name: str, shape: Any) -> None:
            self.shape = tuple(int(d) for d in shape)

    return OutputAllocator


def _max_input_shape(tensor: EngineTensor, profile: int, max_batch_size: int) -> Shape:
    shape = tensor.profiles[profile].max if profile < len(tensor.profiles) else tensor.shape
    if max_batch_size > 0 and shape:
        shape = (min(shape[0], max_batch_size), *shape[1:])  # Triton sizes for the config's max batch too
    return shape


def _nbytes(tensor: EngineTensor, shape: Shape) -> int:
    return math.prod(shape) * TRT_ITEMSIZE[tensor.trt_type]


class GpuExecutor:
    def __init__(
        self,
        trt: Any,
        engine: Any,
        description: EngineDescription,
        profiles: Sequence[int],
        settings: TensorRTSettings,
        device_id: int,
        max_batch_size: int,
    ) -> None:
        self._trt = trt
        self._engine = engine
        self._description = description
        self._device_id = device_id
        self._buffers = {t.name: cuda.DeviceBuffer() for t in description.tensors}
        self._allocators: dict[str, Any] = {}
        self._contexts: dict[int, Any] = {}
        self._stream: cuda.Stream | None = None
        try:
            cuda.set_device(device_id)
            self._stream = cuda.Stream(cuda.stream_priority(settings.priority))
            strategy = getattr(trt.ExecutionContextAllocationStrategy, settings.allocation_strategy)
            for profile in profiles:
                self._contexts[profile] = self._create_context(strategy, profile)
            self._allocate(max_batch_size)
        except BaseException:
            self.close()
            raise

    def _create_context(self, strategy: Any, profile: int) -> Any:
        assert self._stream is not None
        context = self._engine.create_execution_context(strategy)
        if context is None:
            raise cuda.CudaError("TensorRT could not create an execution context (is the GPU out of memory?)")
        if profile != 0:
            if not context.set_optimization_profile_async(profile, self._stream.handle):
                raise cuda.CudaError(f"TensorRT could not select optimization profile {profile}")
            self._stream.synchronize()
        return context

    def _allocate(self, max_batch_size: int) -> None:
        """Size every buffer for the largest shapes of every profile of the instance."""
        for profile, context in self._contexts.items():
            for tensor in self._description.inputs:
                shape = _max_input_shape(tensor, profile, max_batch_size)
                if not context.set_input_shape(tensor.name, shape):
                    raise cuda.CudaError(f"TensorRT refused shape {list(shape)} for input '{tensor.name}'")
                self._buffers[tensor.name].ensure(_nbytes(tensor, shape))
            for tensor in self._description.outputs:
                shape = tuple(int(d) for d in context.get_tensor_shape(tensor.name))
                if all(d >= 0 for d in shape):
                    self._buffers[tensor.name].ensure(_nbytes(tensor, shape))

    def _allocator(self, name: str) -> Any:
        allocator = self._allocators.get(name)
        if allocator is None:
            allocator = self._allocators[name] = output_allocator_class(self._trt)()
        return allocator

    def run(self, profile: int, inputs: Arrays, output_names: Sequence[str]) -> Arrays:
        stream = self._stream
        if stream is None:
            raise InternalError("the TensorRT instance is closed")
        cuda.set_device(self._device_id)  # the worker thread may not have used this GPU yet
        staged: list[npt.NDArray[Any]] = []  # host arrays must outlive their asynchronous copies
        try:
            return self._run(self._contexts[profile], profile, inputs, output_names, stream, staged)
        finally:
            if staged:
                _quietly(stream.synchronize)  # no copy may still read a host array after this returns

    def _run(
        self,
        context: Any,
        profile: int,
        inputs: Arrays,
        output_names: Sequence[str],
        stream: cuda.Stream,
        staged: list[npt.NDArray[Any]],
    ) -> Arrays:
        for tensor in self._description.inputs:
            array = np.ascontiguousarray(inputs[tensor.name], dtype=_NUMPY[tensor.trt_type])
            if not context.set_input_shape(tensor.name, array.shape):
                raise BackendInvalidArgument(
                    f"TensorRT refused shape {list(array.shape)} for input '{tensor.name}' on optimization "
                    f"profile {profile}"
                )
            address = self._buffers[tensor.name].ensure(array.nbytes)
            staged.append(array)
            cuda.copy_to_device(address, array, stream)
            context.set_tensor_address(tensor.name, address)
        shapes: dict[str, Shape] = {}
        for tensor in self._description.outputs:
            shape = tuple(int(d) for d in context.get_tensor_shape(tensor.name))
            if any(d < 0 for d in shape):
                context.set_output_allocator(tensor.name, self._allocator(tensor.name))
                continue
            shapes[tensor.name] = shape
            context.set_tensor_address(tensor.name, self._buffers[tensor.name].ensure(_nbytes(tensor, shape)))
        if not context.execute_async_v3(stream.handle):
            raise InternalError("TensorRT failed to enqueue the batch (its log says why)")
        if len(shapes) < len(self._description.outputs):
            stream.synchronize()  # data-dependent output shapes are final once the batch has run
        results: Arrays = {}
        for name in output_names:
            output = self._description.tensor(name)
            if output is None or output.is_input:
                raise InternalError(f"the TensorRT engine has no output '{name}'")
            if name in shapes:
                shape, address = shapes[name], self._buffers[name].ptr
            else:
                allocator = self._allocators[name]
                shape, address = allocator.shape, allocator.buffer.ptr
            host = np.empty(shape, dtype=_NUMPY[output.trt_type])
            staged.append(host)
            cuda.copy_to_host(host, address, stream)
            results[name] = host
        stream.synchronize()
        return results

    def close(self) -> None:
        """Release the contexts, device memory and stream; best effort, as the instance is going away."""
        if not _quietly(cuda.set_device, self._device_id):
            return  # a dead driver: nothing left to release on it
        self._contexts.clear()  # contexts before the memory they point at
        for buffer in self._buffers.values():
            _quietly(buffer.free)
        for allocator in self._allocators.values():
            _quietly(allocator.buffer.free)
        self._allocators.clear()
        if self._stream is not None:
            stream, self._stream = self._stream, None
            _quietly(stream.destroy)


def _quietly(call: Any, *args: Any) -> bool:
    """Run a cleanup call; log instead of raising, so that one failure does not leak the rest."""
    try:
        call(*args)
    except Exception as e:  # CudaError after a device fault
        log.warning("TensorRT backend cleanup failed: %s", e)
        return False
    return True


__all__ = ["GpuExecutor", "output_allocator_class"]
