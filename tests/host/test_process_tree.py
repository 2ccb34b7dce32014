"""A process tree's usage: the root and its children counted together; a process that is gone is None."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil

from modelhost.host.process_tree import tree_usage


def test_children_are_counted_with_their_parent() -> None:
    alone = tree_usage(os.getpid())
    assert alone is not None
    # A child that holds 64 MiB resident until it is told to end.
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; b = bytearray(64 << 20); b[::4096] = b'x' * len(b[::4096]); "
         "sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        together = tree_usage(os.getpid())
        assert together is not None
        child_rss = psutil.Process(child.pid).memory_info().rss
        assert child_rss > 64 << 20
        assert together.rss_bytes >= alone.rss_bytes + child_rss - (16 << 20)
        assert together.started == alone.started == psutil.Process(os.getpid()).create_time()
    finally:
        child.communicate(b"")


def test_a_process_that_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert tree_usage(child.pid) is None
