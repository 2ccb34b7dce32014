"""`modelhost perf`: perf_analyzer's job (throughput and latency of a model on a Triton-compatible server).

See docs/perf.md. The parts: options (the command line), client (metadata, config, statistics), inputs (the
tensors), bodies (prebuilt requests), worker (load-generator processes), measure (windows, stability, sweep),
report (text, CSV, profile export), plot (HTML and PNG).
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from modelhost.perf.client import PerfError

if TYPE_CHECKING:
    from modelhost.perf.client import ModelInfo
    from modelhost.perf.inputs import Entry, InputData
    from modelhost.perf.options import PerfOptions
    from modelhost.perf.shm import ShmRefs
    from modelhost.perf.worker import WorkerSpec

ERROR = 1  # a run that failed: dead server, unknown model, failed requests


def main(argv: Sequence[str]) -> int:
    """`modelhost perf ARGV`; bad flags exit with argparse's code 2 and message."""
    from modelhost.perf.options import parse_args

    try:
        options = parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 0
    try:
        return _run(options)
    except PerfError as error:
        sys.stdout.flush()
        print(f"modelhost perf: error: {error}", file=sys.stderr)
        return ERROR
    except KeyboardInterrupt:
        return 130


def _run(options: object) -> int:
    from modelhost.perf import client, inputs, measure, report
    from modelhost.perf.options import PerfOptions
    from modelhost.perf.progress import Progress
    from modelhost.perf.shm import SystemShm, layout

    assert isinstance(options, PerfOptions)
    control = client.control_client(options)
    try:
        info = control.model_info()
        if info.decoupled and not options.streaming:
            raise PerfError(f"model {info.name!r} is decoupled: use --streaming (with -i grpc)")
        if info.sequence and not options.is_concurrency:
            raise PerfError(
                f"model {info.name!r} is a sequence model: --request-rate-range is not supported with "
                "sequence models yet; use --concurrency-range"
            )
        data = inputs.build_input_data(info, options)
        processes = options.worker_count()
        if info.sequence:
            _check_sequence_ids(options, processes)
        control.stats()  # fails early where the server has no statistics for the model
        with contextlib.ExitStack() as stack:
            shm_refs: list[ShmRefs | None] = [None] * processes
            if options.shared_memory == "system":
                entries = data.entries
                regions = SystemShm(control, layout(entries, info, options), entries, processes)
                shm_refs = list(stack.enter_context(regions).refs)
            specs = [worker_spec(options, info, data, i, processes, shm_refs[i]) for i in range(processes)]
            print(report.settings_text(options, processes), flush=True)
            progress = Progress(options)
            pool = measure.WorkerPool(specs)
            try:
                profiler = measure.Profiler(options, control, pool, on_window=progress.window)

                def on_step(result: measure.StepResult) -> None:
                    progress.clear()
                    print(report.step_text(result, options), flush=True)

                results = profiler.sweep(on_step)
            finally:
                progress.clear()
                pool.close()
    finally:
        control.close()
    print(report.summary_text(results, options), flush=True)
    if options.csv_file:
        report.write_csv(Path(options.csv_file), results, options)
    if options.profile_export_file:
        report.write_profile_export(Path(options.profile_export_file), results, options, info)
    if options.plot_prefix:
        from modelhost.perf.plot import write_plots

        title = f"{info.name}: latency vs throughput ({options.protocol}, batch {options.batch_size})"
        for note in write_plots(options.plot_prefix, results, options, title):
            print(note)
    return 0


def _check_sequence_ids(options: PerfOptions, processes: int) -> None:
    """Each slot runs its own sequences, each with an id no other slot holds at the same time: the range must
    hold enough ids (each process takes those equal to its index modulo the process count)."""
    first, end = options.sequence_id_range
    most = int(max(options.load_values))
    per_process = math.ceil(most / processes)
    if per_process > (end - first) // processes:
        raise PerfError(
            f"--sequence-id-range {first}:{end} holds {end - first} sequence ids: too few for concurrency "
            f"{most} over {processes} process(es), which needs {per_process * processes}"
        )


def worker_spec(
    options: PerfOptions, info: ModelInfo, data: InputData, index: int, count: int, shm: ShmRefs | None
) -> WorkerSpec:
    """The prebuilt requests of load-generator process `index` (its shared-memory regions, its sequence ids)."""
    from modelhost.perf import bodies, client
    from modelhost.perf.worker import SequenceSpec, WorkerSpec

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
