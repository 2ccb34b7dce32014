"""`modelhost perf`: perf_analyzer's job (throughput and latency of a model on a Triton-compatible server).

See docs/perf.md. The parts: options (the command line), client (metadata, config, statistics), inputs (the
tensors), bodies (prebuilt requests), worker (load-generator processes), measure (windows, stability, sweep),
report (text, CSV, profile export), plot (HTML and PNG).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from modelhost.perf.client import PerfError

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
    from modelhost.perf import bodies, client, inputs, measure, report
    from modelhost.perf.options import PerfOptions
    from modelhost.perf.progress import Progress
    from modelhost.perf.worker import WorkerSpec

    assert isinstance(options, PerfOptions)
    control = client.control_client(options)
    try:
        info = control.model_info()
        if info.decoupled:
            raise PerfError(f"model {info.name!r} is decoupled: --streaming is not supported yet")
        if info.sequence:
            raise PerfError(
                f"model {info.name!r} is a sequence model: sequences are not supported by perf yet"
            )
        data = inputs.build_input_data(info, options)
        if options.protocol == "http":
            host, port = client.split_url(options.url, 8000)
            requests = [bodies.http_request(e, options, info, f"{host}:{port}") for e in data.entries]
            spec = WorkerSpec("http", host, port, requests)
        else:
            host, port = client.split_url(options.url, 8001)
            requests = [bodies.grpc_request(e, info) for e in data.entries]
            spec = WorkerSpec("grpc", host, port, requests, bodies.GRPC_INFER_METHOD)
        control.stats()  # fails early where the server has no statistics for the model
        processes = options.worker_count()
        print(report.settings_text(options, processes), flush=True)
        progress = Progress(options)
        pool = measure.WorkerPool(spec, processes)
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
