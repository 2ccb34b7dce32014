"""The response cache end to end: `--cache-config local,size=...` with `response_cache { enable: true }`; a
repeated request is answered from the cache (statistics and metrics say so), anything else is not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from e2e.models import add_identity
from e2e.server_process import RunningServer, running_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, frontend_processes: int) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("cache_repo")
    add_identity(repo, "cached", "FP32", dims="[ -1 ]", extra="response_cache { enable: true }")
    add_identity(repo, "uncached", "FP32", dims="[ -1 ]")
    add_identity(repo, "cached_bytes", "BYTES", dims="[ -1 ]", extra="response_cache { enable: true }")
    # Room for a few small answers only: a 400 KB one is never kept, and small ones evict each other.
    with running_server(
        [repo], tmp_path_factory.mktemp("log") / "s.log", "--cache-config=local,size=4096"
    ) as s:
        yield s


def _infer(http: httpclient.InferenceServerClient, model: str, values: np.ndarray) -> np.ndarray:
    tensor = httpclient.InferInput(
        "INPUT0", list(values.shape), "BYTES" if values.dtype == object else "FP32"
    )
    tensor.set_data_from_numpy(values)
    result = http.infer(model, [tensor]).as_numpy("OUTPUT0")
    assert result is not None
    return result


def _stats(http: httpclient.InferenceServerClient, model: str) -> dict:  # type: ignore[type-arg]
    return http.get_inference_statistics(model)["model_stats"][0]  # type: ignore[no-any-return]


def test_a_repeated_request_is_answered_from_the_cache(http: httpclient.InferenceServerClient) -> None:
    values = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(_infer(http, "cached", values), values)
    stats = _stats(http, "cached")
    assert stats["execution_count"] == 1  # once run, twice served from the cache
    assert stats["inference_stats"]["success"]["count"] == 3
    assert stats["inference_stats"]["cache_hit"]["count"] == 2
    assert stats["inference_stats"]["cache_miss"]["count"] == 1
    other = np.array([[4.0, 5.0, 6.0]], dtype=np.float32)
    np.testing.assert_array_equal(_infer(http, "cached", other), other)  # other inputs: a miss
    assert _stats(http, "cached")["execution_count"] == 2


def test_bytes_tensors_are_keyed_by_their_elements(http: httpclient.InferenceServerClient) -> None:
    first = np.array([[b"ab", b"c"]], dtype=object)
    second = np.array([[b"a", b"bc"]], dtype=object)  # the same bytes, other elements: another answer
    assert _infer(http, "cached_bytes", first).tolist() == [[b"ab", b"c"]]
    assert _infer(http, "cached_bytes", second).tolist() == [[b"a", b"bc"]]
    assert _infer(http, "cached_bytes", first).tolist() == [[b"ab", b"c"]]
    assert _stats(http, "cached_bytes")["inference_stats"]["cache_hit"]["count"] == 1


def test_a_model_without_response_cache_is_never_cached(http: httpclient.InferenceServerClient) -> None:
    values = np.ones((1, 3), dtype=np.float32)
    for _ in range(2):
        _infer(http, "uncached", values)
    stats = _stats(http, "uncached")
    assert stats["execution_count"] == 2
    assert stats["inference_stats"]["cache_hit"]["count"] == 0


def test_an_answer_larger_than_the_cache_is_not_kept(http: httpclient.InferenceServerClient) -> None:
    big = np.zeros((1, 100_000), dtype=np.float32)
    for _ in range(2):
        _infer(http, "cached", big)
    assert _stats(http, "cached")["inference_stats"]["cache_hit"]["count"] == 2  # unchanged from above


def test_cache_metrics(server: RunningServer) -> None:
    text = requests.get(f"http://localhost:{server.metrics_port}/metrics", timeout=10).text
    samples = {
        # The parser names a counter's samples <family>_total; Triton's counters have no suffix.
        (family.name, s.labels.get("model", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("nv_cache_num_hits_per_model", "cached")] == 2
    assert ("nv_cache_num_hits_per_model", "uncached") not in samples
    assert samples[("nv_cache_num_hits", "")] == 3
    assert samples[("nv_cache_num_entries", "")] >= 1
    assert 0 < samples[("nv_cache_util", "")] <= 1


def test_cache_summaries_with_summary_latencies(tmp_path: Path) -> None:
    # Triton's L0_metrics: nv_cache_{hit,miss}_summary_per_model, and no request summary for a cached model.
    add_identity(tmp_path / "repo", "cached", "FP32", dims="[ -1 ]", extra="response_cache { enable: true }")
    args = ("--cache-config=local,size=1048576", "--metrics-config=summary_latencies=true")
    with running_server([tmp_path / "repo"], tmp_path / "s.log", *args) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        values = np.array([[1.0, 2.0]], dtype=np.float32)
        for _ in range(3):
            _infer(http, "cached", values)
        text = requests.get(f"http://localhost:{server.metrics_port}/metrics", timeout=10).text
    counts = {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.endswith("_count") and s.labels.get("model") == "cached"
    }
    assert counts["nv_cache_hit_summary_per_model_count"] == 2
    assert counts["nv_cache_miss_summary_per_model_count"] == 1
    assert "nv_inference_request_summary" not in text


def test_a_redis_cache_without_its_address_is_refused_in_tritons_words(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "modelhost", "serve", "--model-repository", str(tmp_path),
         "--cache-config=redis,host=localhost"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "Failed to initialize RedisCache, didn't specify address" in done.stderr
