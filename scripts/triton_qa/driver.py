"""Runs one of Triton's unittest-style qa test files as `python3 FILE [TEST ...]` would, and records each
test's outcome in a JSON file.

Started by the runner in a fresh interpreter (the project's virtualenv) with the suite's folder as the working
directory: ``python driver.py --results OUT.json FILE [TEST ...]``, or ``--list`` to write the ids of the
tests the file holds without running them. The file runs as ``__main__`` (its ``unittest.main()`` included),
with ``unittest.TextTestRunner`` recording into OUT.json as it goes, so a test process that is killed still
leaves the outcomes of the tests that finished. This file imports nothing of the runner.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import time
import traceback
import unittest
from typing import Any

_RECORDS: list[dict[str, Any]] = []
_RESULTS_PATH = ""


def _flush() -> None:
    tmp = _RESULTS_PATH + ".tmp"
    with open(tmp, "w") as f:
        json.dump(_RECORDS, f, indent=1)
    os.replace(tmp, _RESULTS_PATH)


def _test_id(test: Any) -> str:
    if isinstance(test, unittest.TestCase) and not hasattr(test, "description"):
        name = test.id()
    else:  # _ErrorHolder (setUpClass, setUpModule) and anything else
        name = getattr(test, "description", None) or str(test)
    for prefix in ("__main__.", "test_module."):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    return name.replace("(__main__.", "(")


def _record(test: Any, outcome: str, message: str = "") -> None:
    record = {"id": _test_id(test), "outcome": outcome, "message": message}
    # The provisional record startTest wrote for this test (see below) is replaced.
    if _RECORDS and _RECORDS[-1].get("running") and _RECORDS[-1]["id"] == record["id"]:
        _RECORDS[-1] = record
    else:
        _RECORDS.append(record)
    _flush()


def _start(test: Any) -> None:
    """A provisional "errored" record while the test runs: a test process killed during it (a hang) leaves it."""
    _RECORDS.append(
        {
            "id": _test_id(test),
            "outcome": "errored",
            "message": "no result: the test was still running when the test process ended",
            "running": True,
        }
    )
    _flush()


class RecordingResult(unittest.TextTestResult):
    """A TextTestResult (so the console output is unchanged) that also records every outcome."""

    def startTest(self, test: unittest.TestCase) -> None:
        self._started = time.monotonic()
        super().startTest(test)
        _start(test)

    def stopTest(self, test: unittest.TestCase) -> None:
        super().stopTest(test)
        # A test whose subtests failed has no outcome of its own: its subtests' records stand for it.
        name = _test_id(test)
        running = [i for i, r in enumerate(_RECORDS) if r.get("running") and r["id"] == name]
        if running and any(r["id"].startswith(name + " ") for r in _RECORDS):
            del _RECORDS[running[-1]]
            _flush()

    def addSuccess(self, test: unittest.TestCase) -> None:
        super().addSuccess(test)
        _record(test, "passed")

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addFailure(test, err)
        _record(test, "failed", self._exc_info_to_string(err, test))

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        super().addError(test, err)
        _record(test, "errored", self._exc_info_to_string(err, test))

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        _record(test, "skipped", reason)

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addExpectedFailure(test, err)
        _record(test, "passed", "expected failure (unittest.expectedFailure)")

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        super().addUnexpectedSuccess(test)
        _record(test, "failed", "unexpected success (unittest.expectedFailure)")

    def addSubTest(self, test: unittest.TestCase, subtest: unittest.TestCase, err: Any) -> None:
        super().addSubTest(test, subtest, err)
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            _record(subtest, "failed" if failed else "errored", self._exc_info_to_string(err, test))


_SKIPS: list[tuple[str, str]] = []


def _install_skips() -> None:
    """Tests the runner leaves out (--skip PATTERN=REASON) are reported as skipped without running."""
    import fnmatch

    original = unittest.TestCase.run

    def run(self: unittest.TestCase, result: Any = None) -> Any:
        name = _test_id(self)
        for pattern, reason in _SKIPS:
            if fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name.rsplit(".", 1)[-1], pattern):
                if result is not None:
                    result.startTest(self)
                    result.addSkip(self, reason)
                    result.stopTest(self)
                return result
        return original(self, result)

    unittest.TestCase.run = run  # type: ignore[method-assign]


def _list_tests(path: str, names: list[str]) -> list[str]:
    sys.argv = [path]
    module = runpy.run_path(path, run_name="test_module")
    mod = type(sys)("test_module")
    mod.__dict__.update(module)
    loader = unittest.TestLoader()
    suite = loader.loadTestsFromNames(names, mod) if names else loader.loadTestsFromModule(mod)
    ids: list[str] = []

    def walk(s: Any) -> None:
        for t in s:
            if isinstance(t, unittest.TestSuite):
                walk(t)
            else:
                ids.append(_test_id(t))

    walk(suite)
    return ids


def main() -> int:
    global _RESULTS_PATH
    # This file's folder is not the test's: a test's `import models` must not find the runner's modules.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", required=True)
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--skip", action="append", default=[], help="PATTERN=REASON")
    parser.add_argument("file")
    parser.add_argument("args", nargs=argparse.REMAINDER)  # the test file's own, flags included (-v)
    ns = parser.parse_args()
    _RESULTS_PATH = ns.results
    path = os.path.abspath(ns.file)
    sys.path.insert(0, os.path.dirname(path))
    if ns.list:
        with open(_RESULTS_PATH, "w") as f:
            json.dump(_list_tests(path, ns.args), f)
        return 0
    _flush()
    for item in ns.skip:
        pattern, _, reason = item.partition("=")
        _SKIPS.append((pattern, reason))
    if _SKIPS:
        _install_skips()
    unittest.TextTestRunner.resultclass = RecordingResult  # type: ignore[assignment]
    sys.argv = [path, *ns.args]
    code = 0
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
        _RECORDS.append({"id": "<module>", "outcome": "errored", "message": traceback.format_exc()})
        _flush()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


if __name__ == "__main__":
    # os._exit: a test file's threads (clients, servers it started) must not keep the process alive.
    rc = main()
    os._exit(rc)
