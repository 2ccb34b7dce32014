"""`--shared-memory system`: one input and one output system shared-memory region per load-generator process.

The parent process creates the regions (POSIX shared memory under /dev/shm), writes every data entry's inputs
once, registers the regions with the server and, whatever happens (errors, Ctrl-C), unregisters and removes
them at the end. The requests only name the regions, offsets and sizes.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from multiprocessing import shared_memory

from modelhost.perf.client import ControlClient, ModelInfo, PerfError
from modelhost.perf.inputs import Entry
from modelhost.perf.options import PerfOptions

ALIGNMENT = 64


@dataclass(frozen=True, slots=True)
class ShmLayout:
    inputs: list[list[tuple[int, int]]]  # per data entry, per input: offset and byte size in the input region
    outputs: list[tuple[str, int, int]]  # per output: name, offset and byte size in the output region
    input_size: int
    output_size: int


@dataclass(frozen=True, slots=True)
class ShmRefs:
    """What the requests of one process reference."""

    input_region: str
    output_region: str
    layout: ShmLayout


def _aligned(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def layout(entries: list[Entry], info: ModelInfo, options: PerfOptions) -> ShmLayout:
    """Inputs one after the other (64-byte aligned); per output `--output-shared-memory-size` x batch size, as
    perf_analyzer allocates (output size x outputs x batch size in all)."""
    offset = 0
    inputs: list[list[tuple[int, int]]] = []
    for entry in entries:
        refs = []
        for tensor in entry:
            refs.append((offset, len(tensor.raw)))
            offset = _aligned(offset + max(1, len(tensor.raw)))
        inputs.append(refs)
    per_output = options.output_shm_size * options.batch_size
    outputs = [(t.name, i * per_output, per_output) for i, t in enumerate(info.outputs)]
    return ShmLayout(inputs, outputs, max(offset, 1), max(per_output * len(info.outputs), 1))


class SystemShm:
    """The regions of a run: created, written and registered on entry; unregistered and removed on exit."""

    def __init__(self, control: ControlClient, shm_layout: ShmLayout, entries: list[Entry], processes: int):
        self.control = control
        self.layout = shm_layout
        self.entries = entries
        self.processes = processes
        self.prefix = f"modelhost_perf_{os.getpid()}"
        self.segments: list[shared_memory.SharedMemory] = []
        self.registered: list[str] = []
        self.refs: list[ShmRefs] = []

    def _create(self, name: str, size: int) -> shared_memory.SharedMemory:
        try:
            segment = shared_memory.SharedMemory(name=name, create=True, size=size)
        except OSError as error:
            raise PerfError(f"cannot create shared memory {name!r}: {error.strerror or error}") from None
        self.segments.append(segment)
        return segment

    def _register(self, segment: shared_memory.SharedMemory, size: int) -> str:
        name = segment.name.lstrip("/")
        self.control.register_system_shm(name, "/" + name, size)
        self.registered.append(name)
        return name

    def __enter__(self) -> SystemShm:
        try:
            for i in range(self.processes):
                inputs = self._create(f"{self.prefix}_{i}_input", self.layout.input_size)
                buf = inputs.buf
                assert buf is not None
                for entry, refs in zip(self.entries, self.layout.inputs, strict=True):
                    for tensor, (offset, size) in zip(entry, refs, strict=True):
                        buf[offset : offset + size] = tensor.raw
                outputs = self._create(f"{self.prefix}_{i}_output", self.layout.output_size)
                self.refs.append(
                    ShmRefs(
                        self._register(inputs, self.layout.input_size),
                        self._register(outputs, self.layout.output_size),
                        self.layout,
                    )
                )
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for name in self.registered:
            with contextlib.suppress(Exception):
                self.control.unregister_system_shm(name)
        self.registered = []
        for segment in self.segments:
            with contextlib.suppress(Exception):
                segment.close()
            with contextlib.suppress(Exception):
                segment.unlink()
        self.segments = []
