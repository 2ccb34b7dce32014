"""`modelhost perf`: perf_analyzer's job (throughput and latency of a model on a Triton-compatible server).

See docs/perf.md. The parts: options (the command line), command (main()'s frame, shared with tune), client
(metadata, config, statistics), inputs (the tensors), bodies (prebuilt requests), specs (each load-generator
process's requests), worker (the load-generator processes: sequences, recorder, worker_base, http_load,
grpc_load), measure (windows, stability, sweep), report (text, CSV, profile export), plot (HTML and PNG).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from modelhost.perf.client import PerfError
from modelhost.perf.command import run_command

if TYPE_CHECKING:
    from modelhost.perf.options import PerfOptions
    from modelhost.perf.shm import ShmRefs


def main(argv: Sequence[str]) -> int:
    """`modelhost perf ARGV`; bad flags exit with argparse's code 2 and message, a failed run (dead server, unknown
    model, failed requests) with 1, Ctrl-C with 130."""
    from modelhost.perf.options import parse_args

    return run_command("modelhost perf", argv, parse_args, _run, PerfError)


def _run(options: PerfOptions) -> int:
    from modelhost.perf import client, inputs, measure, report
    from modelhost.perf.progress import Progress
    from modelhost.perf.shm import SystemShm, layout
    from modelhost.perf.specs import worker_spec

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
