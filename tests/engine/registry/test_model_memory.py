"""Sizes, out-of-memory messages and the memory of a process tree (model_memory.py)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from modelhost.engine.registry.model_memory import (
    Footprint,
    MemorySample,
    is_out_of_memory,
    parse_size,
    process_tree_rss,
)


@pytest.mark.parametrize(
    ("text", "size"),
    [("100", 100), ("1KiB", 1024), ("1 MB", 10**6), ("2GiB", 2 << 30), ("0.5g", 5 * 10**8), ("25%", 250)],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text, ram=1000) == size


@pytest.mark.parametrize("text", ["", "-1", "1 XB", "%", "0%", "101%", "0"])
def test_parse_size_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text, ram=1000)


@pytest.mark.parametrize(
    ("message", "oom"),
    [
        ("CUDA out of memory. Tried to allocate 2.00 GiB", True),
        ("MemoryError: cannot allocate", True),
        ("onnxruntime: Failed to allocate memory for requested buffer", True),
        ("std::bad_alloc", True),
        ("OOM when allocating tensor", True),
        ("no room left in the sequence slots", False),
        ("unexpected input 'ROOM'", False),
        ("model.onnx not found", False),
    ],
)
def test_out_of_memory_messages(message: str, oom: bool) -> None:
    assert is_out_of_memory(message) is oom


def test_the_tree_counts_child_processes() -> None:
    before = process_tree_rss()
    code = "import time; b = bytearray(80 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 20
        while process_tree_rss() - before < 80 << 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process_tree_rss() - before >= 80 << 20
    finally:
        child.kill()
        child.wait()


def test_footprint_between_samples() -> None:
    footprint = Footprint.between(MemorySample(100, {0: 50}), MemorySample(300, {0: 80, 1: 10}))
    assert footprint.host == 200
    assert footprint.gpus == {0: 30, 1: 0}  # a GPU not sampled before counts nothing
    assert Footprint.between(MemorySample(300), MemorySample(100)).host == 0
