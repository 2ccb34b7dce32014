"""What each load-generator process is given (pickled to it at its start): its prebuilt requests, those of
sequences, its shared-memory regions and its share of the sequence ids."""

from __future__ import annotations

from dataclasses import dataclass

from modelhost.perf import bodies, client
from modelhost.perf.client import ModelInfo
from modelhost.perf.inputs import Entry, InputData
from modelhost.perf.options import PerfOptions
from modelhost.perf.shm import ShmRefs


@dataclass(frozen=True, slots=True)
class SequenceSpec:
    """How the requests of sequences are made: per data stream, per entry, a prebuilt request for each of the
    flags start/middle/end/start+end (index start * 2 + end), with the offset of the id field (HTTP) or -1
    (gRPC: the id's parameter is appended)."""

    templates: list[list[list[tuple[bytes, int]]]]
    length: int
    variation_pct: float
    id_start: int
    id_end: int  # excluded


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    protocol: str  # "http" | "grpc"
    host: str
    port: int
    requests: list[bytes]  # HTTP: whole requests (head + body); gRPC: serialized ModelInferRequest
    grpc_method: str = ""
    sequence: SequenceSpec | None = None
    streaming: bool = False  # gRPC ModelStreamInfer (grpc_method is then the stream's)
    decoupled: bool = False  # streaming: a request is done at its response marked triton_final_response
    process_index: int = 0
    process_count: int = 1


def worker_spec(
    options: PerfOptions, info: ModelInfo, data: InputData, index: int, count: int, shm: ShmRefs | None
) -> WorkerSpec:
    """The prebuilt requests of load-generator process `index` (its shared-memory regions, its sequence ids)."""
    flag_sets = ((False, False), (False, True), (True, False), (True, True))  # index start * 2 + end
    entries = data.entries
    firsts = [sum(len(s) for s in data.streams[:i]) for i in range(len(data.streams))]
    empty_final = options.streaming and info.decoupled
    if options.protocol == "http":
        host, port = client.split_url(options.url, 8000)
        target = f"{host}:{port}"

        def build(entry: Entry, i: int, flags: bodies.Flags) -> tuple[bytes, int]:
            return bodies.http_template(entry, options, info, target, shm, i, flags)

        method = ""
    else:
        host, port = client.split_url(options.url, 8001)

        def build(entry: Entry, i: int, flags: bodies.Flags) -> tuple[bytes, int]:
            return bodies.grpc_request(entry, info, shm, i, flags, empty_final), -1

        method = bodies.GRPC_STREAM_METHOD if options.streaming else bodies.GRPC_INFER_METHOD
    sequence = None
    if info.sequence:
        templates = [
            [[build(entry, firsts[s] + j, flags) for flags in flag_sets] for j, entry in enumerate(stream)]
            for s, stream in enumerate(data.streams)
        ]
        first_id, end_id = options.sequence_id_range
        sequence = SequenceSpec(
            templates, options.sequence_length, options.sequence_length_variation, first_id, end_id
        )
    return WorkerSpec(
        options.protocol,
        host,
        port,
        [build(entry, i, None)[0] for i, entry in enumerate(entries)],
        method,
        sequence=sequence,
        streaming=options.streaming,
        decoupled=info.decoupled,
        process_index=index,
        process_count=count,
    )
