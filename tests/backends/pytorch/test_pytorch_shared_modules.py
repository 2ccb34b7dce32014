"""ENABLE_WEIGHT_SHARING's module table: one load per key, reused by the key's other instances, and a slow load
of one model never holds up another model's load or unload."""

from __future__ import annotations

import threading

import pytest

from modelhost.backends.pytorch.sharing import SharedModules


def test_a_slow_load_does_not_block_another_key_and_the_same_key_reuses_it() -> None:
    table = SharedModules()
    slow_started, finish_slow = threading.Event(), threading.Event()
    loads: list[str] = []

    def slow() -> str:
        loads.append("a")
        slow_started.set()
        finish_slow.wait(5)
        return "module-a"

    results: dict[str, tuple[object, bool]] = {}
    first = threading.Thread(target=lambda: results.__setitem__("a1", table.acquire("a", slow)))
    first.start()
    assert slow_started.wait(5)
    # Another model loads and releases while "a" is still loading (a table that held one lock through every
    # load would keep "b" waiting until "a" is done).
    b_done = threading.Event()

    def other_model() -> None:
        assert table.acquire("b", lambda: "module-b") == ("module-b", False)
        table.release("b")
        b_done.set()

    threading.Thread(target=other_model).start()
    assert b_done.wait(3), "loading model b waited for model a's load"
    assert not finish_slow.is_set()
    assert table.held("b") == 0
    second = threading.Thread(target=lambda: results.__setitem__("a2", table.acquire("a", slow)))
    second.start()
    finish_slow.set()
    first.join(5)
    second.join(5)
    assert loads == ["a"]
    assert sorted(results.values(), key=lambda r: r[1]) == [("module-a", False), ("module-a", True)]
    assert table.held("a") == 2


def test_a_failed_load_lets_the_next_instance_try_again() -> None:
    table = SharedModules()

    def broken() -> str:
        raise RuntimeError("corrupt file")

    with pytest.raises(RuntimeError, match="corrupt file"):
        table.acquire("k", broken)
    assert table.acquire("k", lambda: "module") == ("module", False)
