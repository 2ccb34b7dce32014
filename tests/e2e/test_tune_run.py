"""`python -m modelhost tune` as users run it: it starts its own server, measures variants of a tiny model within a
short time limit, and writes the best config, the CSV, the report and the plots; a second run resumes the first.

Short windows (100 ms, at most 3 per point) and small ranges, so that a search ends by itself in seconds; the time
limits are bounds it does not reach, except where a test has the limit cut a search on purpose. The tests check
what is written and how a run ended by the run's own account, never how fast anything is.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from e2e.models import copy_examples
from e2e.server_process import running_server
from modelhost.tune.results import CSV_COLUMNS

TUNE_MODELS = Path(__file__).parent / "tune_models"


@pytest.fixture(scope="module")
def frontend_processes() -> int:
    """The tuner starts its own servers, of the modes it measures: this module runs once, not once per mode."""
    return 0


LIMIT_S = 60  # a bound: the quick search of SMALL's space ends by itself well before (some 12 s)
CUT_LIMIT_S = 8  # the brute search of SMALL's space measures some 40 points (15 s or more): this limit cuts it
WINDOWS = ["--measurement-interval=100", "--max-trials=3", "--no-progress"]
SMALL = ["--max-instance-count=2", "--max-model-batch-size=16", "--max-concurrency=8", *WINDOWS]
# Smaller still, where a test needs a few measured points and nothing else of the search.
TINY = ["--max-instance-count=1", "--max-model-batch-size=8", "--max-concurrency=2", *WINDOWS]


@dataclass
class Run:
    output: Path
    result: subprocess.CompletedProcess[str]

    @property
    def checkpoint(self) -> dict[str, object]:
        value = json.loads((self.output / "checkpoint.json").read_text())
        assert isinstance(value, dict)
        return value


def tune(*args: str) -> Run:
    output = Path(args[args.index("--output") + 1])
    result = subprocess.run(
        [sys.executable, "-m", "modelhost", "tune", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return Run(output, result)


def points_of(run: Run) -> list[dict[str, object]]:
    points = run.checkpoint["points"]
    assert isinstance(points, list)
    return points


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("tune_repo")
    copy_examples(repository, "simple")
    shutil.copytree(TUNE_MODELS / "batch_limited", repository / "batch_limited")
    return repository


@pytest.fixture(scope="module")
def first(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A quick search of `simple` under a 50 ms budget, priced, ended by converging (or by its limit)."""
    output = tmp_path_factory.mktemp("tune_out") / "simple"
    run = tune(
        "-m", "simple", f"--model-repository={repo}", "--time-limit", f"{LIMIT_S}s", "--latency-budget-ms", "50",
        "--instance-price", "0.34", "--output", str(output), *SMALL,
    )  # fmt: skip
    assert run.result.returncode == 0, run.result.stderr + run.result.stdout
    return run


def test_a_run_says_how_it_ended(
    first: Run, stopped_then_resumed: tuple[list[dict[str, object]], Run, Run]
) -> None:
    # How a run ended, by its own account (the terminal's summary line and the report): the quick search ran to
    # its end, or its limit ended it.
    summary = next(line for line in first.result.stdout.splitlines() if line.startswith("Measured "))
    assert summary.endswith(("(quick search)", "(quick search, stopped by the time limit)")), summary
    ended = "the search ran to its end" if summary.endswith("(quick search)") else "stopped by the time limit"
    assert f"({ended})" in (first.output / "report.html").read_text()
    # The brute search of this space is longer than the cut run's limit: the limit is what ended it.
    _, cut, _ = stopped_then_resumed
    cut_summary = next(line for line in cut.result.stdout.splitlines() if line.startswith("Measured "))
    assert cut_summary.endswith("(brute search, stopped by the time limit)"), cut.result.stdout


def test_the_best_config_is_written_with_a_diff_and_loads_and_serves(
    first: Run, repo: Path, tmp_path: Path
) -> None:
    written = (first.output / "config.pbtxt").read_text()
    tuned = text_format.Parse(written, ModelConfig())
    diff = (first.output / "config.diff").read_text()
    assert diff.startswith("--- a/simple/config.pbtxt\n+++ b/simple/config.pbtxt\n")
    added = [line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added and all(line in written.splitlines() for line in added)
    assert "Best configuration: simple_config" in first.result.stdout
    # the stated best is the variant whose config was written
    best_name = first.result.stdout.split("Best configuration: ", 1)[1].split(":", 1)[0]
    assert (first.output / "variants" / best_name / "config.pbtxt").read_text() == written

    serving = tmp_path / "repo"
    shutil.copytree(repo / "simple", serving / "simple")
    (serving / "simple" / "config.pbtxt").write_text(written)
    with running_server([serving], tmp_path / "server.log") as server:
        client = httpclient.InferenceServerClient(server.http_url)
        served = client.get_model_config("simple")
        assert served["max_batch_size"] == tuned.max_batch_size
        assert served["instance_group"][0]["count"] == tuned.instance_group[0].count
        assert ("dynamic_batching" in served) == tuned.HasField("dynamic_batching")
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            tensor = httpclient.InferInput(name, [1, 16], "INT32")
            tensor.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
            inputs.append(tensor)
        answer = client.infer("simple", inputs)
        assert answer.as_numpy("OUTPUT0").tolist() == [list(range(0, 32, 2))]


def test_the_csv_has_a_row_per_measured_point(first: Run) -> None:
    with (first.output / "metrics-model-inference.csv").open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == CSV_COLUMNS
    assert rows[0][:9] == [
        "Model", "Batch", "Concurrency", "Model Config Path", "Instance Group", "Max Batch Size",
        "Satisfies Constraints", "Throughput (infer/sec)", "p99 Latency (ms)",
    ]  # fmt: skip
    points = points_of(first)
    assert len(rows) - 1 == len(points) >= 2
    measured = {(p["variant"], p["concurrency"]) for p in points}
    column = {name: i for i, name in enumerate(rows[0])}
    for row in rows[1:]:
        assert row[column["Model"]] == "simple"
        assert (first.output / "variants" / row[column["Model Config Path"]] / "config.pbtxt").is_file()
        assert float(row[column["Throughput (infer/sec)"]]) > 0
        assert float(row[column["p99 Latency (ms)"]]) > 0
        assert row[column["Satisfies Constraints"]] in ("Yes", "No")
        assert float(row[column["Server Compute Infer time (ms)"]]) > 0  # from the statistics extension
        assert float(row[column["Server CPU (cores)"]]) > 0  # the server's process tree
        assert float(row[column["RAM Usage (MB)"]]) > 10
        assert float(row[column["Cost per 1M Inferences (USD)"]]) > 0
    assert len(measured) == len(points)


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_the_report_renders_with_its_plots(first: Run) -> None:
    page = (first.output / "report.html").read_text()
    parser = Tags()
    parser.feed(page)
    ids = {attrs.get("id") for _, attrs in parser.tags}
    assert {"throughput-vs-p99", "latency-breakdown", "top-configurations", "all-points"} <= ids
    assert sum(1 for tag, _ in parser.tags if tag == "circle") >= len(points_of(first))
    assert not any(tag == "script" or attrs.get("src") for tag, attrs in parser.tags)  # self-contained
    for name in ("throughput_vs_p99.png", "latency_breakdown.png"):
        assert (first.output / "plots" / name).read_bytes().startswith(b"\x89PNG")


def test_a_second_run_needs_resume_or_overwrite(first: Run) -> None:
    again = tune("-m", "simple", "--model-repository", "unused", "--output", str(first.output), *SMALL)
    assert again.result.returncode == 2
    assert "--resume continues it" in again.result.stderr


@pytest.fixture(scope="module")
def stopped_then_resumed(
    repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[dict[str, object]], Run, Run]:
    """A brute search cut by its limit, then resumed under the same limit: (the points of the first, both runs)."""
    output = tmp_path_factory.mktemp("tune_resume") / "simple"
    args = [
        "-m",
        "simple",
        f"--model-repository={repo}",
        "--search",
        "brute",
        "--output",
        str(output),
        *SMALL,
    ]
    cut = tune(*args, "--time-limit", f"{CUT_LIMIT_S}s")
    assert "stopped by the time limit" in cut.result.stdout, cut.result.stdout + cut.result.stderr
    before = points_of(cut)
    return before, cut, tune(*args, "--time-limit", f"{CUT_LIMIT_S}s", "--resume")


def test_resume_skips_finished_points(stopped_then_resumed: tuple[list[dict[str, object]], Run, Run]) -> None:
    before, _, resumed = stopped_then_resumed
    assert resumed.result.returncode == 0, resumed.result.stderr
    assert resumed.result.stdout.count("from the checkpoint") == len(before) > 0
    after = points_of(resumed)
    assert all(point in after for point in before)  # kept exactly, measured by run 1
    new = [p for p in after if p["run"] == 2]
    assert new, "the resumed run measured nothing new"
    assert not {(p["variant"], p["concurrency"]) for p in new} & {
        (p["variant"], p["concurrency"]) for p in before
    }


def test_a_variant_that_fails_to_load_is_reported_and_the_sweep_goes_on(repo: Path, tmp_path: Path) -> None:
    output = tmp_path / "limited"
    run = tune(
        "-m", "batch_limited", f"--model-repository={repo}", "--time-limit", f"{LIMIT_S}s", "--output", str(output),
        *TINY,
    )  # fmt: skip
    assert run.result.returncode == 0, run.result.stdout + run.result.stderr
    variants = run.checkpoint["variants"]
    assert isinstance(variants, list)
    failed = [v for v in variants if v["failure"]]
    assert len(failed) >= 1
    assert all(v["variant"]["max_batch_size"] > 4 for v in failed)
    assert "max_batch_size 8 is above what this model supports" in failed[0]["failure"]
    assert "failed: the server could not load it" in run.result.stdout
    order = [v["name"] for v in variants]
    measured_names = {v["name"] for v in variants if any(p["variant"] == key(v) for p in points_of(run))}
    assert any(order.index(name) > order.index(failed[0]["name"]) for name in measured_names)
    page = (output / "report.html").read_text()
    assert "max_batch_size 8 is above what this model supports" in page


def key(entry: dict[str, object]) -> str:
    from modelhost.tune.space import Variant

    variant = entry["variant"]
    assert isinstance(variant, dict)
    return Variant.from_json(variant).key


def test_url_mode_tunes_a_running_server_and_gives_it_back_its_config(repo: Path, tmp_path: Path) -> None:
    with running_server(
        [repo], tmp_path / "server.log", "--model-control-mode=explicit", "--load-model=simple"
    ) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        before = client.get_model_config("simple")
        run = tune(
            "-m", "simple", "--url", server.http_url, "--metrics-url", f"http://localhost:{server.metrics_port}/metrics",
            "--time-limit", f"{LIMIT_S}s", "--output", str(tmp_path / "out"), *TINY,
        )  # fmt: skip
        assert run.result.returncode == 0, run.result.stdout + run.result.stderr
        assert client.get_model_config("simple") == before  # the repository's config, loaded again
        assert client.is_model_ready("simple")
    with (tmp_path / "out" / "metrics-model-inference.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and all(float(row["Throughput (infer/sec)"]) > 0 for row in rows)
    assert all(float(row["RAM Usage (MB)"]) > 0 for row in rows)  # the host's, from nv_cpu_memory_used_bytes
    assert all(row["Server CPU (cores)"] == "" for row in rows)  # not the server's alone: left out


def test_a_server_without_model_control_is_refused(repo: Path, tmp_path: Path) -> None:
    with running_server([repo], tmp_path / "server.log") as server:
        run = tune("-m", "simple", "--url", server.http_url, "--output", str(tmp_path / "out"), *SMALL)
    assert run.result.returncode == 1
    assert "start it with --model-control-mode=explicit" in run.result.stderr
    assert run.result.stderr.count("\n") == 1  # one line, no traceback


def test_bad_requests_get_one_clear_line(repo: Path, tmp_path: Path) -> None:
    unknown = tune("-m", "nosuch", f"--model-repository={repo}", "--output", str(tmp_path / "a"), *SMALL)
    assert unknown.result.returncode == 1
    assert unknown.result.stderr == f"modelhost tune: error: no model 'nosuch' in {repo}\n"
    bad_flag = tune(
        "-m", "simple", f"--model-repository={repo}", "--time-limit", "soon", "--output", str(tmp_path / "b")
    )
    assert bad_flag.result.returncode == 2
    assert "expected a duration such as 90s" in bad_flag.result.stderr


def test_a_model_that_cannot_load_at_all_is_one_clear_error_and_leaves_nothing(
    repo: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "repo"
    shutil.copytree(repo / "batch_limited", broken / "batch_limited")
    config = broken / "batch_limited" / "config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size: 4", "max_batch_size: 8"))
    links_before = set(Path(tempfile.gettempdir()).glob("modelhost-tune-*"))
    run = tune(
        "-m", "batch_limited", f"--model-repository={broken}", "--output", str(tmp_path / "out"), *SMALL
    )
    assert run.result.returncode == 1
    assert run.result.stderr.startswith("modelhost tune: error: the server stopped")
    assert (
        "max_batch_size 8 is above what this model supports" in run.result.stderr
    )  # the server's own reason
    assert run.result.stderr.count("\n") == 1
    assert (
        set(Path(tempfile.gettempdir()).glob("modelhost-tune-*")) == links_before
    )  # its private repository removed
