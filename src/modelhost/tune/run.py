"""One tuning run, in order: the model's config, the server, the search space, the search within the time
limit, then the results written out."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.config import config_from_json
from modelhost.config.files import CONFIG_FILENAME, read_config
from modelhost.config.normalize import is_ensemble
from modelhost.errors import ModelConfigError
from modelhost.host.devices import cpu_count, gpu_count
from modelhost.perf.client import PerfError
from modelhost.tune import checkpoint, search
from modelhost.tune.goal import Goal
from modelhost.tune.measure import Measurer, perf_options
from modelhost.tune.options import TuneOptions
from modelhost.tune.plots import write_pngs
from modelhost.tune.progress import Progress
from modelhost.tune.report import write_html
from modelhost.tune.resources import fetch_gauges
from modelhost.tune.results import CSV_FILENAME, Results, config_text, summary_lines, write_configs, write_csv
from modelhost.tune.session import Session, TimeUp
from modelhost.tune.space import Space, Variant, base_variant, build_space, problem
from modelhost.tune.target import OwnServer, Target, TuneError

OK, ERROR, USAGE, INTERRUPTED = 0, 1, 2, 130


def reserve(limit: float) -> float:
    """Time kept back from the limit for stopping the server and writing the results."""
    return min(15.0, max(2.0, limit * 0.05))


def read_file_config(options: TuneOptions) -> ModelConfig | None:
    """The model's own config.pbtxt where the repository is a local directory: variants are made from it, so the
    written config keeps everything the tuner does not vary."""
    repository = options.model_repository
    if repository is None or "://" in repository:
        return None
    model_dir = Path(repository, options.model)
    if not model_dir.is_dir():
        raise TuneError(f"no model {options.model!r} in {repository}")
    if not (model_dir / CONFIG_FILENAME).is_file():
        return None
    try:
        return read_config(model_dir / CONFIG_FILENAME, options.model)
    except ModelConfigError as error:
        raise TuneError(str(error)) from None


def start_target(options: TuneOptions, log_path: Path, deadline: float) -> Target:
    left = max(1.0, deadline - time.monotonic())
    if options.url is not None:
        target = Target(options.url, options.model, options.metrics_url)
        target.check_control(left)
        return target
    assert options.model_repository is not None
    return OwnServer(options.model_repository, options.model, log_path, options.server_flags, left)


def served_config(target: Target, model: str) -> ModelConfig:
    """The config the server completed (auto-complete, defaults): what the space and validation start from."""
    try:
        served = config_from_json(json.dumps(target.config()), model)
    except ModelConfigError as error:
        raise TuneError(str(error)) from None
    if is_ensemble(served):
        raise TuneError(f"model {model!r} is an ensemble: tune the models it is made of")
    return served


@dataclass
class Plan:
    """What the run varies and how it judges, from the served config and the host."""

    served: ModelConfig
    base_config: ModelConfig  # the config variants are made from (the file's, else the served one)
    space: Space
    base: Variant
    goal: Goal
    gpus: int


def plan(options: TuneOptions, target: Target, file_config: ModelConfig | None) -> Plan:
    served = served_config(target, options.model)
    if options.url is None:
        gpus = gpu_count()
    else:
        gpus = int(any(name.startswith("nv_gpu") for name in fetch_gauges(options.metrics_url)))
    space = build_space(
        served,
        gpu_count=gpus,
        cores=cpu_count(),
        max_instance_count=options.max_instance_count,
        max_model_batch_size=options.max_model_batch_size,
        max_concurrency=options.max_concurrency,
    )
    goal = Goal(options.objective, options.latency_budget_ms, options.min_throughput, options.price_per_hour)
    base_config = file_config if file_config is not None else served
    return Plan(served, base_config, space, base_variant(served), goal, gpus)


def run_state(options: TuneOptions, output: Path, base_config: ModelConfig) -> checkpoint.RunState:
    """A new run's state, or the checkpoint's with --resume (refused when its settings differ)."""
    fingerprint = {
        "config": config_text(base_config),
        "measurement_interval_ms": options.measurement_interval_ms,
        "stability_percentage": options.stability_percentage,
        "server": options.url or "own",
        "server_flags": options.server_flags,
    }
    if not options.resume:
        return checkpoint.RunState(options.model, fingerprint)
    try:
        return checkpoint.load(output, options.model, fingerprint)
    except checkpoint.CheckpointError as error:
        raise TuneError(str(error)) from None


def run(options: TuneOptions) -> int:
    started = time.monotonic()
    deadline = started + options.time_limit_s - reserve(options.time_limit_s)
    output = Path(options.output)
    output.mkdir(parents=True, exist_ok=True)
    if (output / checkpoint.FILENAME).exists() and not (options.resume or options.overwrite):
        print(
            f"modelhost tune: error: {output} holds the checkpoint of an earlier run: --resume continues it, "
            "--overwrite starts afresh (or choose another --output)",
            file=sys.stderr,
        )
        return USAGE
    file_config = read_file_config(options)
    first: Target | None = start_target(options, output / "server.log", deadline)
    assert first is not None
    try:
        p = plan(options, first, file_config)
        state = run_state(options, output, p.base_config)
    except TuneError:
        first.close()
        raise
    state.record(p.base, default=True)
    progress = Progress(p.goal, started, deadline, options.progress, p.space.thread_parameter)
    perf = perf_options(
        options.model,
        first.url,
        options.max_concurrency,
        options.measurement_interval_ms,
        options.stability_percentage,
        options.max_trials,
    )

    def connect() -> tuple[Target, Measurer]:
        """The server already started, the first time; a new one after it died (a variant can crash it)."""
        nonlocal first
        target = first if first is not None else start_target(options, output / "server.log", deadline)
        first = None
        try:
            return target, Measurer(replace(perf, url=target.url), target, on_window=progress.window)
        except PerfError as error:
            target.close()
            raise TuneError(str(error)) from None

    session = Session(
        state=state,
        goal=p.goal,
        space=p.space,
        base_config=p.base_config,
        validate=lambda variant: problem(variant, p.served, p.gpus, p.space.thread_parameter),
        connect=connect,
        reporter=progress,
        deadline=deadline,
        interval_ms=options.measurement_interval_ms,
        max_trials=options.max_trials,
        output=output,
        owns_server=options.url is None,
    )
    interrupted = _search(options, session, p, progress)
    if first is not None:
        first.close()  # never handed to the session: nothing was measured
    results = Results(
        model=options.model,
        state=state,
        goal=p.goal,
        search=options.search,
        thread_parameter=p.space.thread_parameter,
        default_key=p.base.key,
        wall_s=time.monotonic() - started,
        stopped_by_time=session.stopped_by_time,
        price_label=options.price_label,
    )
    code = write_results(results, p.base_config, output)
    return INTERRUPTED if interrupted else code


def _search(options: TuneOptions, session: Session, p: Plan, progress: Progress) -> bool:
    """Runs the search until it ends, the time limit, or Ctrl-C (then True); stops the server either way."""
    progress.line(
        f"Tuning {options.model!r} ({options.search} search, objective {options.objective}, time limit "
        f"{options.time_limit_s:.0f} s) from {p.base.describe(p.space.thread_parameter)}"
    )
    try:
        if options.search == "brute":
            progress.expected_variants = len(search.brute_variants(p.space, p.base))
            search.run_brute(session, p.base)
        else:
            search.run_quick(session, p.base)
    except TimeUp:
        pass
    except KeyboardInterrupt:
        # Model Analyzer's Ctrl-C: stop measuring, write what was found; the checkpoint lets --resume go on.
        progress.line("Interrupted: writing the results so far; --resume continues from the last measurement")
        return True
    finally:
        progress.clear()
        if options.url is not None and session.target is not None:
            session.target.restore()  # the config it served before the run
        session.close()
    return False


def write_results(results: Results, base_config: ModelConfig, output: Path) -> int:
    written: list[Path] = []
    chosen = write_configs(results, base_config, config_text(base_config), output)
    if chosen is not None:
        written += [chosen, output / "config.diff"]
    write_csv(results, output / CSV_FILENAME)
    write_html(output / "report.html", results)
    written += [output / CSV_FILENAME, output / "report.html"]
    notes = write_pngs(output / "plots", results)
    for line in summary_lines(results, written):
        print(line)
    for note in notes:
        print(note)
    return OK if results.chosen is not None and results.feasible else ERROR
