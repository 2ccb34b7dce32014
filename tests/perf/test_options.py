"""The command line of `modelhost perf`: perf_analyzer's defaults, ranges, shapes and the flags' errors."""

from __future__ import annotations

import argparse

import pytest

from modelhost.perf import main
from modelhost.perf.options import Range, parse_range, parse_shape
from perf.models import options


def test_defaults_are_perf_analyzers() -> None:
    o = options()
    assert (o.url, o.protocol, o.batch_size, o.interval_ms, o.stability_pct, o.max_trials) == (
        "localhost:8000",
        "http",
        1,
        5000,
        10.0,
        10,
    )
    assert o.concurrency == Range(1, 1, 1) and o.request_rate is None
    assert o.percentile == -1 and o.percentiles == (50, 90, 95, 99)
    assert options("-i", "grpc").url == "localhost:8001"


def test_ranges() -> None:
    assert parse_range("2:8:2", True).values(0) == [2, 4, 6, 8]
    assert parse_range("4", True).values(0) == [4]
    assert parse_range("1:3", True).values(0) == [1, 2, 3]
    assert parse_range("100:200:50", False).values(0) == [100, 150, 200]
    assert parse_range("1:0:1", True).values(5) == [1, 2, 3, 4, 5]
    for bad in ("x", "0:4", "4:2", "1:4:0", "1:2:3:4", "1::2"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_range(bad, True)


def test_shape_flag() -> None:
    assert parse_shape("IMAGE:3,224,224") == ("IMAGE", [3, 224, 224])
    assert parse_shape("a:b:4") == ("a:b", [4])
    with pytest.raises(argparse.ArgumentTypeError):
        parse_shape("IMAGE")


@pytest.mark.parametrize(
    "args",
    [
        ["--concurrency-range", "1:2", "--request-rate-range", "10:20"],
        ["--percentile", "100"],
        ["--concurrency-range", "1:0"],
        ["-i", "grpc", "--input-tensor-format", "json"],
        ["-i", "tcp"],
        ["-b", "0"],
    ],
)
def test_bad_flags_are_argparse_errors(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-m", "simple", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("modelhost perf: error: ")


def test_worker_count() -> None:
    assert options("--processes", "3").worker_count() == 3
    assert options("--concurrency-range", "1").worker_count() == 1


def test_percentile_is_reported_too() -> None:
    assert options("--percentile", "75").percentiles == (50, 75, 90, 95, 99)


def test_new_options() -> None:
    o = options()
    assert (o.streaming, o.shared_memory, o.output_shm_size) == (False, "none", 102400)
    assert (o.sequence_length, o.sequence_length_variation, o.sequence_id_range) == (20, 20.0, (1, 2**63 - 1))
    o = options("-i", "grpc", "--streaming", "--shared-memory", "system", "--output-shared-memory-size", "64")
    assert (o.streaming, o.shared_memory, o.output_shm_size) == (True, "system", 64)
    o = options("--sequence-length", "5", "--sequence-length-variation", "0", "--sequence-id-range", "7:9")
    assert (o.sequence_length, o.sequence_length_variation, o.sequence_id_range) == (5, 0.0, (7, 9))
    assert options("--sequence-id-range", "3").sequence_id_range == (3, 2**63 - 1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--streaming"], "--streaming is only valid with -i grpc"),
        (["--shared-memory", "cuda"], "--shared-memory cuda is not supported"),
        (["--shared-memory", "gpu"], "invalid choice"),
        (["--sequence-id-range", "5:5"], "start < end"),
        (["--sequence-id-range", "0:4"], "start < end"),
        (["--sequence-id-range", "a"], "expected start[:end]"),
        (["--output-shared-memory-size", "0"], "must be at least 1"),
    ],
)
def test_new_option_errors(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-m", "simple", *args]) == 2
    assert message in capsys.readouterr().err
