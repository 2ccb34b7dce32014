"""scripts/triton_qa.py's own logic: parsing test results, expected failures, the summary, and one suite run end to
end on a fake Triton checkout (a test file and no server). No network, no Triton checkout, no modelhost server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from triton_qa import models, report
from triton_qa.core import (
    Check,
    Config,
    ConfigResult,
    LeftOut,
    Run,
    Suite,
    SuiteResult,
    TestResult,
    apply_known,
    match_known,
    parse_driver_results,
    parse_junit,
    short_message,
)
from triton_qa.runner import run_suite, translate_args
from triton_qa.suites import ORDER, SUITES

FAKE_TEST = """
import unittest


class FakeTest(unittest.TestCase):
    def test_passes(self):
        self.assertEqual(1, 1)

    def test_fails(self):
        self.assertEqual(1, 2, "one is not two")

    def test_errors(self):
        raise RuntimeError("boom")

    @unittest.skip("not here")
    def test_skipped(self):
        pass

    def test_left_out(self):
        raise AssertionError("must not run")


if __name__ == "__main__":
    unittest.main()
"""


def test_every_suite_of_the_brief_has_a_recipe() -> None:
    assert list(SUITES) == ORDER
    assert SUITES["L0_ragged_batching"].qa_dir == "L0_batch_input"


def test_parse_driver_results(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(
        json.dumps(
            [
                {"id": "A.test_a", "outcome": "passed"},
                {"id": "A.test_b", "outcome": "failed", "message": "Traceback...\nAssertionError: x"},
                {"id": "A.test_c", "outcome": "weird"},
            ]
        )
    )
    results = parse_driver_results(path, "file")
    assert [(r.id, r.outcome) for r in results] == [
        ("file.A.test_a", "passed"),
        ("file.A.test_b", "failed"),
        ("file.A.test_c", "errored"),
    ]
    assert parse_driver_results(tmp_path / "missing.json", "file") == []


def test_parse_junit(tmp_path: Path) -> None:
    path = tmp_path / "r.xml"
    path.write_text(
        """<testsuites><testsuite>
        <testcase classname="mod.Cls" name="test_ok"/>
        <testcase classname="mod.Cls" name="test_bad"><failure message="assert 1 == 2">trace</failure></testcase>
        <testcase classname="mod.Cls" name="test_err"><error message="boom">trace</error></testcase>
        <testcase classname="mod.Cls" name="test_skip"><skipped message="no gpu"/></testcase>
        <testcase classname="Other" name="test_outside"/>
        </testsuite></testsuites>"""
    )
    results = {r.id: r for r in parse_junit(path, "mod")}
    assert results["mod.Cls.test_ok"].outcome == "passed"
    assert results["mod.Cls.test_bad"].outcome == "failed"
    assert "assert 1 == 2" in results["mod.Cls.test_bad"].message
    assert results["mod.Cls.test_err"].outcome == "errored"
    assert results["mod.Cls.test_skip"].outcome == "skipped"
    assert "mod.Other.test_outside" in results


def test_known_and_suspect_failures() -> None:
    results = [
        TestResult("f.C.test_timeout", "failed", "x"),
        TestResult("f.C.test_other", "errored", "y"),
        TestResult("f.C.test_ok", "passed"),
        TestResult("check.log_line", "failed", "z"),
    ]
    out = apply_known(results, {"test_time*": "not yet"}, {"log_line": "Triton's wording"})
    assert [r.outcome for r in out] == ["known", "errored", "passed", "failed"]
    assert out[0].reason == "not yet"
    assert out[3].reason.startswith("likely not modelhost")
    assert match_known("f.C.test_x", {"C.test_x": "r"}) == "r"
    assert match_known("f.C.test_x", {"test_y": "r"}) is None


def test_short_message_puts_the_exception_first() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/tmp/out/work/qa/L0_x/t.py", line 3, in test_a\n'
        "    self.assertTrue(False)\n"
        "AssertionError: False is not true : expected 3\n"
    )
    assert short_message(text) == (
        'AssertionError: False is not true : expected 3\n(File "qa/L0_x/t.py", line 3, in test_a)'
    )
    assert short_message("just a line\nand another", 1) == "just a line"


def test_translate_args_adds_client_shm_once() -> None:
    assert translate_args(["--model-repository=m"]) == ["--model-repository=m", "--allow-client-shm=true"]
    assert translate_args(["--allow-client-shm=false"]) == ["--allow-client-shm=false"]


def test_summary_counts_and_markdown(tmp_path: Path) -> None:
    cfg = ConfigResult("L0_x", "default", ["--model-repository=m", "--log-verbose=1"])
    cfg.results = [
        TestResult("t.A.test_1", "passed"),
        TestResult("t.A.test_2", "failed", "AssertionError: 1 != 2"),
        TestResult("t.A.test_3", "known", "refused", "--flag: not yet"),
        TestResult("t.A.test_4", "skipped", "needs a GPU"),
    ]
    suite = SuiteResult("L0_x", [cfg], [LeftOut("plan models", "needs TensorRT")], ["a note"], 12.0)
    c = report.totals([suite])
    assert report.pass_line(c).startswith("1 of 3 tests pass")
    md = report.to_markdown([suite], {"triton": "v2.51.0"})
    assert "`t.A.test_2` (failed, configuration `default`)" in md
    assert "--flag: not yet" in md
    assert "plan models: needs TensorRT" in md
    report.write(tmp_path, [suite], {"triton": "v2.51.0"})
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["total"]["ran"] == 3
    again = report.suite_from_json(data["suites"][0])
    assert again.counts() == suite.counts()


def test_stand_in_translation(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    ident = repo / "nop_x"
    ident.mkdir(parents=True)
    (ident / "config.pbtxt").write_text(
        'name: "nop_x"\nbackend: "identity"\ndefault_model_filename: "libtriton_identity.so"\n'
        "instance_group [ { kind: KIND_GPU } ]\n"
    )
    onnx = repo / "onnx_y" / "1"
    onnx.mkdir(parents=True)
    (repo / "onnx_y" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\n')
    models.translate_repositories([f"--model-repository={repo}"], tmp_path)
    text = (ident / "config.pbtxt").read_text()
    assert 'backend: "python"' in text and "KIND_CPU" in text and "libtriton_identity.so" not in text
    # By its absolute path, so that version folders made later and left empty load it too.
    assert f'default_model_filename: "{models.stand_in("identity").resolve()}"' in text
    assert (ident / "1").is_dir() and not (ident / "1" / "model.py").exists()
    assert not (onnx / "model.py").exists()


@pytest.fixture
def fake_triton(tmp_path: Path) -> Path:
    triton = tmp_path / "triton"
    (triton / "qa" / "common").mkdir(parents=True)
    (triton / "qa" / "common" / "test_util.py").write_text("")
    (triton / "qa" / "L0_fake").mkdir()
    (triton / "qa" / "L0_fake" / "fake_test.py").write_text(FAKE_TEST)
    return triton


def test_a_suite_end_to_end_without_a_server(fake_triton: Path, tmp_path: Path) -> None:
    def configs(ctx):  # type: ignore[no-untyped-def]
        return [
            Config(
                name="no-server",
                args=[],
                start="none",
                steps=[
                    Run("fake_test.py", skip={"test_left_out": "needs a GPU"}, timeout=120),
                    Check("always_holds", lambda ctx, server: None),
                ],
                known={"test_errors": "another issue"},
            ),
            Config(name="variant", args=[], start="none", steps=[], full_only=True),
        ]

    suite = Suite("L0_fake", configs, left_out=[LeftOut("the GPU part", "needs a GPU")])
    out = tmp_path / "out"
    result = run_suite(suite, fake_triton, out, out / "cache", sys.executable, log=lambda m: None)
    outcomes = {r.id: r.outcome for r in result.configs[0].results}
    assert outcomes == {
        "fake_test.FakeTest.test_passes": "passed",
        "fake_test.FakeTest.test_fails": "failed",
        "fake_test.FakeTest.test_errors": "known",
        "fake_test.FakeTest.test_skipped": "skipped",
        "fake_test.FakeTest.test_left_out": "skipped",
        "check.always_holds": "passed",
    }
    assert any("--full" in x.reason for x in result.left_out)
    assert (out / "work" / "qa" / "common").is_symlink()
    assert (out / "logs" / "L0_fake" / "00-no-server" / "client.log").exists()
