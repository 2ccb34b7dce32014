"""`modelhost tune`: Model Analyzer's job (find the configuration that serves a model best), in minutes.

See docs/tune.md. The parts: options (the command line), space (what varies, and the config a variant makes),
target (the server measured), measure (perf's load engine, in process), session (points within the time limit,
checkpointed), search (quick and brute), goal (constraints, objective, Pareto front), results (config, diff,
CSV), report (HTML), plots (PNG), progress (the live line).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from modelhost.tune.target import TuneError

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from modelhost.tune.results import Results

ERROR = 1  # the run failed, or no configuration met the constraints
USAGE = 2


def main(argv: Sequence[str]) -> int:
    from modelhost.tune.options import parse_args

    try:
        options = parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 0
    try:
        return _run(options)
    except TuneError as error:
        sys.stdout.flush()
        print(f"modelhost tune: error: {error}", file=sys.stderr)
        return ERROR
    except KeyboardInterrupt:
        print("modelhost tune: interrupted; --resume continues from the last measurement", file=sys.stderr)
        return 130


def _reserve(limit: float) -> float:
    """Time kept back from the limit for stopping the server and writing the results."""
    return min(15.0, max(2.0, limit * 0.05))


def _run(options: object) -> int:
    from modelhost.config import config_from_json
    from modelhost.config.files import CONFIG_FILENAME, read_config
    from modelhost.config.normalize import is_ensemble
    from modelhost.devices import cpu_count, gpu_count
    from modelhost.errors import ModelConfigError
    from modelhost.perf.client import PerfError
    from modelhost.tune import checkpoint, search
    from modelhost.tune.goal import Goal
    from modelhost.tune.measure import Measurer, perf_options
    from modelhost.tune.options import TuneOptions
    from modelhost.tune.progress import Progress
    from modelhost.tune.resources import fetch_gauges
    from modelhost.tune.results import Results, config_text
    from modelhost.tune.session import Session, TimeUp
    from modelhost.tune.space import Variant, base_variant, build_space, problem
    from modelhost.tune.target import OwnServer, Target

    assert isinstance(options, TuneOptions)
    from dataclasses import replace

    started = time.monotonic()
    deadline = started + options.time_limit_s - _reserve(options.time_limit_s)
    output = Path(options.output)
    output.mkdir(parents=True, exist_ok=True)
    if (output / checkpoint.FILENAME).exists() and not (options.resume or options.overwrite):
        print(
            f"modelhost tune: error: {output} holds the checkpoint of an earlier run: --resume continues it, "
            "--overwrite starts afresh (or choose another --output)",
            file=sys.stderr,
        )
        return USAGE

    # The model's own config file, when the repository is a local directory: variants are made from it, so the
    # written config keeps everything the tuner does not vary.
    file_config: ModelConfig | None = None
    model_dir = Path(options.model_repository, options.model) if options.model_repository else None
    if model_dir is not None and "://" not in str(options.model_repository):
        if not model_dir.is_dir():
            raise TuneError(f"no model {options.model!r} in {options.model_repository}")
        if (model_dir / CONFIG_FILENAME).is_file():
            try:
                file_config = read_config(model_dir / CONFIG_FILENAME, options.model)
            except ModelConfigError as error:
                raise TuneError(str(error)) from None

    owns_server = options.url is None
    log_path = output / "server.log"

    def start() -> Target:
        if options.url is not None:
            target = Target(options.url, options.model, options.metrics_url)
            target.check_control(max(1.0, deadline - time.monotonic()))
            return target
        assert options.model_repository is not None
        return OwnServer(
            options.model_repository,
            options.model,
            log_path,
            options.server_flags,
            max(1.0, deadline - time.monotonic()),
        )

    target: Target | None = start()
    assert target is not None
    try:
        served = config_from_json(json.dumps(target.config()), options.model)
    except (ModelConfigError, TuneError):
        target.close()
        raise
    if is_ensemble(served):
        target.close()
        raise TuneError(f"model {options.model!r} is an ensemble: tune the models it is made of")
    base_config = file_config if file_config is not None else served
    gpus = (
        gpu_count()
        if owns_server
        else int(any(k.startswith("nv_gpu") for k in fetch_gauges(options.metrics_url)))
    )
    space = build_space(
        served,
        gpu_count=gpus,
        cores=cpu_count(),
        max_instance_count=options.max_instance_count,
        max_model_batch_size=options.max_model_batch_size,
        max_concurrency=options.max_concurrency,
    )
    base = base_variant(served)
    goal = Goal(options.objective, options.latency_budget_ms, options.min_throughput, options.price_per_hour)
    fingerprint = {
        "config": config_text(base_config),
        "measurement_interval_ms": options.measurement_interval_ms,
        "stability_percentage": options.stability_percentage,
        "server": options.url or "own",
        "server_flags": options.server_flags,
    }
    try:
        state = (
            checkpoint.load(output, options.model, fingerprint)
            if options.resume
            else checkpoint.RunState(options.model, fingerprint)
        )
    except checkpoint.CheckpointError as error:
        target.close()
        raise TuneError(str(error)) from None
    state.record(base, default=True)
    progress = Progress(goal, started, deadline, options.progress, space.thread_parameter)

    def validate(variant: Variant) -> str | None:
        return problem(variant, served, gpus, space.thread_parameter)

    perf = perf_options(
        options.model,
        "",
        options.max_concurrency,
        options.measurement_interval_ms,
        options.stability_percentage,
        options.max_trials,
    )

    def connect() -> tuple[Target, Measurer]:
        nonlocal target
        current = target if target is not None else start()
        target = None  # a later call (after the server died) starts a new one
        try:
            return current, Measurer(replace(perf, url=current.url), current, on_window=progress.window)
        except PerfError as error:
            current.close()
            raise TuneError(str(error)) from None

    session = Session(
        state=state,
        goal=goal,
        space=space,
        base_config=base_config,
        validate=validate,
        connect=connect,
        reporter=progress,
        deadline=deadline,
        interval_ms=options.measurement_interval_ms,
        max_trials=options.max_trials,
        output=output,
        owns_server=owns_server,
    )

    progress.line(
        f"Tuning {options.model!r} ({options.search} search, objective {options.objective}, time limit "
        f"{options.time_limit_s:.0f} s) from {base.describe(space.thread_parameter)}"
    )
    if options.search == "brute":
        progress.expected_points = len(search.brute_variants(space, base)) * 5
    try:
        if options.search == "brute":
            search.run_brute(session, base)
        else:
            search.run_quick(session, base)
    except TimeUp:
        pass
    finally:
        progress.clear()
        if not owns_server and session.target is not None:
            session.target.load(None, 60)  # the repository's own config again
        session.close()
        if target is not None:
            target.close()
    results = Results(
        model=options.model,
        state=state,
        goal=goal,
        search=options.search,
        thread_parameter=space.thread_parameter,
        default_key=base.key,
        wall_s=time.monotonic() - started,
        stopped_by_time=session.stopped_by_time,
        price_label=options.price_label,
    )
    return _write(results, base_config, output, config_text(base_config))


def _write(results: Results, base_config: ModelConfig, output: Path, current_text: str) -> int:
    from modelhost.tune.plots import write_pngs
    from modelhost.tune.report import write_html
    from modelhost.tune.results import CSV_FILENAME, summary_lines, write_configs, write_csv

    written: list[Path] = []
    chosen_config = write_configs(results, base_config, current_text, output)
    if chosen_config is not None:
        written += [chosen_config, output / "config.diff"]
    write_csv(results, output / CSV_FILENAME)
    write_html(output / "report.html", results)
    written += [output / CSV_FILENAME, output / "report.html"]
    notes = write_pngs(output / "plots", results)
    for line in summary_lines(results, written):
        print(line)
    for note in notes:
        print(note)
    if results.chosen is None or not results.feasible:
        return ERROR
    return 0
