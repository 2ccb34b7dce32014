"""A request's shared-memory refs resolved: the regions one inference request names, held from its decoding until
its answer is written, so that none of them can be unregistered meanwhile (`RegionInUse`). Inputs are read from
their windows (a view of a system region, a host copy of a CUDA one); outputs asked for in shared memory are
checked at once and written into their windows once the model answered."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from modelhost.engine.shared_memory import AnyRegion, SharedMemoryRegistry
from modelhost.errors import InvalidArgument
from modelhost.tensor_codec import array_from_raw, raw_bytes
from modelhost.types import InferenceRequest, InferenceResponse, ShmWindow


@dataclass(slots=True)
class OutputTarget:
    region: AnyRegion
    offset: int
    byte_size: int


@dataclass(slots=True, eq=False)
class Lease:
    """The regions one inference request uses, held from its decoding until its answer is written."""

    registry: SharedMemoryRegistry
    held: list[AnyRegion] = field(default_factory=list)
    outputs: dict[str, OutputTarget] = field(default_factory=dict)

    def _region(self, name: str) -> AnyRegion:
        for region in self.held:
            if region.name == name:
                return region
        region = self.registry.acquire(name)
        self.held.append(region)
        return region

    def input(self, region: str, offset: int, byte_size: int) -> memoryview:
        """The bytes of an input: a view of a system region, a host copy of a CUDA region."""
        return self._region(region).view(offset, byte_size)

    def output(self, output: str, region: str, offset: int, byte_size: int) -> None:
        """Output `output` goes into the region: checked now, written by `write`."""
        target = self._region(region)
        target.check_window(offset, byte_size)
        self.outputs[output] = OutputTarget(target, offset, byte_size)

    def write(self, output: str, datatype: str, data: npt.NDArray[Any]) -> bool:
        """Write an output requested in shared memory into its region; False when it was not requested so."""
        target = self.outputs.get(output)
        if target is None:
            return False
        if datatype == "BYTES":
            blob: bytes | memoryview = raw_bytes(datatype, data)
        else:
            blob = np.ascontiguousarray(data).reshape(-1).view(np.uint8).data
        if len(blob) > target.byte_size:
            # Triton answers this one 500 / INTERNAL; it is the request's fault.
            raise InvalidArgument(
                f"shared memory size specified with the request for output '{output}' ({target.byte_size} bytes) "
                f"should be at least {len(blob)} bytes to hold the results"
            )
        if len(blob):
            target.region.write(target.offset, blob)
        return True

    def read(self, request: InferenceRequest) -> None:
        """Resolve a request's shared-memory refs: each input's data read from its window (a view of a system
        region, a host copy of a CUDA one), each output's window checked for `written`."""
        for tensor in request.inputs:
            window = tensor.shm
            if window is not None:
                view = self.input(window.region, window.offset, window.byte_size)
                tensor.data = array_from_raw(
                    tensor.name, tensor.datatype, tensor.shape, view, request.model_name, request.id
                )
        for output in request.outputs:
            window = output.shm
            if window is not None:
                self.output(output.name, window.region, window.offset, window.byte_size)

    def written(self, response: InferenceResponse) -> InferenceResponse:
        """The response with each output requested in shared memory written into its window and marked so
        (copies: a cached response is shared)."""
        if not self.outputs or response.error is not None:
            return response
        outputs = []
        for tensor in response.outputs:
            if self.write(tensor.name, tensor.datatype, tensor.data):
                target = self.outputs[tensor.name]
                window = ShmWindow(target.region.name, target.offset, target.byte_size)
                tensor = dataclasses.replace(tensor, shm=window)
            outputs.append(tensor)
        return dataclasses.replace(response, outputs=outputs)

    def release(self) -> None:
        held, self.held = self.held, []
        self.outputs.clear()
        for region in held:
            self.registry.release(region)
