"""The backend's config parameters (Triton's names) and torch's process-global thread counts."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from modelhost.backends.pytorch.settings import TorchSettings, read_settings
from modelhost.backends.pytorch.threads import ThreadSettings
from modelhost.config import parse_config_text
from modelhost.errors import ModelConfigError


def _config(**parameters: str) -> Any:
    entries = " ".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in parameters.items()
    )
    return parse_config_text(f'name: "m" platform: "pytorch_libtorch" {entries}', "m", "test")


def test_defaults_are_tritons() -> None:
    assert read_settings(_config()) == TorchSettings(
        optimized_execution=True,
        inference_mode=True,
        cudnn=True,
        weight_sharing=False,
        cache_cleaning=False,
        intra_op_threads=None,
        inter_op_threads=None,
        jit_executor=None,
        jit_profiling=None,
        tensor_fuser=None,
    )


def test_every_parameter() -> None:
    settings = read_settings(
        _config(
            DISABLE_OPTIMIZED_EXECUTION="true",
            INFERENCE_MODE="false",
            DISABLE_CUDNN="1",
            ENABLE_WEIGHT_SHARING="True",
            ENABLE_CACHE_CLEANING="on",
            INTRA_OP_THREAD_COUNT="3",
            INTER_OP_THREAD_COUNT="2",
            ENABLE_JIT_EXECUTOR="false",
            ENABLE_JIT_PROFILING="false",
            ENABLE_TENSOR_FUSER="true",
        )
    )
    assert settings == TorchSettings(
        optimized_execution=False,
        inference_mode=False,
        cudnn=False,
        weight_sharing=True,
        cache_cleaning=True,
        intra_op_threads=3,
        inter_op_threads=2,
        jit_executor=False,
        jit_profiling=False,
        tensor_fuser=True,
    )


def test_thread_counts_of_zero_or_less_mean_unset() -> None:
    settings = read_settings(_config(INTRA_OP_THREAD_COUNT="0", INTER_OP_THREAD_COUNT="-1"))
    assert settings.intra_op_threads is None
    assert settings.inter_op_threads is None


def test_aoti_also_reads_tritons_pt2_spelling_of_cache_cleaning() -> None:
    assert read_settings(_config(CACHE_CLEANING_ENABLED="true"), aoti=True).cache_cleaning
    assert not read_settings(_config(CACHE_CLEANING_ENABLED="true")).cache_cleaning


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("INFERENCE_MODE", "maybe", "parameter 'INFERENCE_MODE' must be 'true' or 'false', got 'maybe'"),
        ("ENABLE_JIT_PROFILING", "2", "parameter 'ENABLE_JIT_PROFILING' must be 'true' or 'false', got '2'"),
        ("INTRA_OP_THREAD_COUNT", "four", "parameter 'INTRA_OP_THREAD_COUNT' must be an integer, got 'four'"),
    ],
)
def test_bad_values_fail_the_load(key: str, value: str, message: str) -> None:
    with pytest.raises(ModelConfigError, match=message):
        read_settings(_config(**{key: value}))


def test_nvfuser_is_accepted_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        read_settings(_config(ENABLE_NVFUSER="true"))
    assert "pytorch parameter 'ENABLE_NVFUSER' is no longer used" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        read_settings(_config(ENABLE_NVFUSER="true"), warn=False)
    assert caplog.text == ""


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def intra(self, count: int) -> None:
        self.calls.append(("intra", count))

    def inter(self, count: int) -> None:
        if any(kind == "inter" for kind, _ in self.calls):
            raise RuntimeError("cannot set number of interop threads after parallel work has started")
        self.calls.append(("inter", count))


def test_the_first_model_that_sets_a_count_wins(caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder()
    threads = ThreadSettings(recorder.intra, recorder.inter)
    with caplog.at_level(logging.INFO):
        threads.claim("a", TorchSettings(intra_op_threads=3, inter_op_threads=2))
        threads.claim("b", TorchSettings(intra_op_threads=5, inter_op_threads=2))
        threads.claim("c", TorchSettings())
    assert recorder.calls == [("intra", 3), ("inter", 2)]
    assert threads.intra == ("a", 3)
    assert "model 'a': INTRA_OP_THREAD_COUNT 3 applies to every PyTorch model of this server" in caplog.text
    assert (
        "model 'b': INTRA_OP_THREAD_COUNT 5 ignored: PyTorch's thread count is process-global and model 'a'"
        in (caplog.text)
    )
    # Every instance then runs with it, whatever its model's share of the cores.
    assert threads.intra_op_threads(budget=1) == 3


def test_an_inter_op_count_torch_refuses_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    def refuse(count: int) -> None:
        raise RuntimeError("cannot set number of interop threads after parallel work has started")

    threads = ThreadSettings(lambda count: None, refuse)
    with caplog.at_level(logging.WARNING):
        threads.claim("a", TorchSettings(inter_op_threads=2))
    assert "INTER_OP_THREAD_COUNT 2 could not be applied: cannot set number of interop threads" in caplog.text


def test_unset_counts_give_each_thread_its_models_share() -> None:
    recorder = Recorder()
    threads = ThreadSettings(recorder.intra, recorder.inter)
    threads.use(budget=1)
    threads.use(budget=1)  # this thread has it already
    threads.use(budget=2)  # another model's instance ran inline on this thread
    worker = threading.Thread(target=threads.use, args=(1,))
    worker.start()
    worker.join()
    assert recorder.calls == [("intra", 1), ("intra", 2), ("intra", 1)]
