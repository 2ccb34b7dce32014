"""The redis response cache against a real redis-server (Debian's, fetched by scripts/fetch_redis.py): two servers
share its entries; a redis that stops, or stops answering, makes requests miss the cache, never fail."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from e2e.models import add_identity
from e2e.server_process import RunningServer, free_ports, running_server

ROOT = Path(__file__).resolve().parents[2]


class Redis:
    """A redis-server of our own on a free port, no persistence."""

    def __init__(self, folder: Path) -> None:
        binary = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "fetch_redis.py")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        (self.port,) = free_ports(1)
        self.command = [
            binary,
            "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", str(folder), "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru",
        ]  # fmt: skip
        self.log = folder / "redis.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while self.cli("PING") != "True":  # redis-py's answer to PONG
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.05)

    def cli(self, *command: str) -> str:
        import redis

        try:
            client = redis.Redis(port=self.port, socket_timeout=5)
            try:
                return str(client.execute_command(*command))
            finally:
                client.close()
        except redis.RedisError as e:
            return f"error: {e}"

    def keys(self) -> int:
        return int(self.cli("DBSIZE"))

    def info(self) -> dict[str, Any]:
        import redis

        client = redis.Redis(port=self.port, socket_timeout=5)
        try:
            return client.info()  # type: ignore[no-any-return]
        finally:
            client.close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Redis]:
    server = Redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("redis_repo")
    add_identity(repo, "cached", "FP32", dims="[ -1 ]", extra="response_cache { enable: true }")
    add_identity(repo, "cached_bytes", "BYTES", dims="[ -1 ]", extra="response_cache { enable: true }")
    return repo


def cache_flags(redis_server: Redis, *more: str) -> list[str]:
    return [
        "--cache-config=redis,host=127.0.0.1",
        f"--cache-config=redis,port={redis_server.port}",
        "--cache-config=redis,socket_timeout=300",
        *[f"--cache-config=redis,{setting}" for setting in more],
    ]


@pytest.fixture(scope="module")
def two_servers(
    redis_server: Redis, repo: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[tuple[RunningServer, RunningServer]]:
    logs = tmp_path_factory.mktemp("redis_logs")
    with (
        running_server([repo], logs / "a.log", *cache_flags(redis_server)) as a,
        running_server([repo], logs / "b.log", *cache_flags(redis_server)) as b,
    ):
        yield a, b
        assert "Traceback" not in a.log() + b.log()


def infer(server: RunningServer, model: str, values: np.ndarray) -> np.ndarray:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        tensor = httpclient.InferInput(
            "INPUT0", list(values.shape), "BYTES" if values.dtype == object else "FP32"
        )
        tensor.set_data_from_numpy(values)
        result = client.infer(model, [tensor]).as_numpy("OUTPUT0")
        assert result is not None
        return result
    finally:
        client.close()


def stats(server: RunningServer, model: str) -> dict:  # type: ignore[type-arg]
    r = requests.get(f"http://{server.http_url}/v2/models/{model}/stats", timeout=10)
    return r.json()["model_stats"][0]  # type: ignore[no-any-return]


def test_an_answer_computed_by_one_server_is_served_by_the_other(
    two_servers: tuple[RunningServer, RunningServer], redis_server: Redis
) -> None:
    a, b = two_servers
    values = np.random.default_rng().random((1, 5), dtype=np.float32)
    before = redis_server.keys()
    np.testing.assert_array_equal(infer(a, "cached", values), values)  # a miss: a runs the model
    deadline = time.monotonic() + 10
    while redis_server.keys() == before:  # the insert goes out after the answer
        assert time.monotonic() < deadline
        time.sleep(0.05)
    runs_on_b = stats(b, "cached")["execution_count"]
    np.testing.assert_array_equal(infer(b, "cached", values), values)  # b never ran it
    after = stats(b, "cached")
    assert after["execution_count"] == runs_on_b
    assert after["inference_stats"]["cache_hit"]["count"] >= 1


def test_bytes_answers_travel_through_redis(
    two_servers: tuple[RunningServer, RunningServer], redis_server: Redis
) -> None:
    a, b = two_servers
    values = np.array([[b"shared", b"", b"\x00bytes"]], dtype=object)
    np.testing.assert_array_equal(infer(a, "cached_bytes", values), values)
    deadline = time.monotonic() + 10
    hits = stats(b, "cached_bytes")["inference_stats"]["cache_hit"]["count"]
    while True:  # until a's insert has landed, b's request is a miss
        np.testing.assert_array_equal(infer(b, "cached_bytes", values), values)
        if stats(b, "cached_bytes")["inference_stats"]["cache_hit"]["count"] > hits:
            break
        assert time.monotonic() < deadline


def cache_metrics(server: RunningServer) -> dict[str, float]:
    text = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("nv_cache_")
    }


def test_cache_metrics_count_lookups(two_servers: tuple[RunningServer, RunningServer]) -> None:
    a, _ = two_servers
    values = np.array([[7.0]], dtype=np.float32)
    infer(a, "cached", values)
    values_by_name = cache_metrics(a)
    assert values_by_name["nv_cache_num_lookups"] >= 1
    assert values_by_name["nv_cache_num_lookups"] == (
        values_by_name["nv_cache_num_hits"] + values_by_name["nv_cache_num_misses"]
    )


def test_cache_metrics_show_redis_entries_memory_and_evictions(
    two_servers: tuple[RunningServer, RunningServer], redis_server: Redis
) -> None:
    """Entries, utilisation and evictions are the shared cache's own (redis's INFO), the same on both servers."""
    a, b = two_servers
    infer(a, "cached", np.random.default_rng().random((1, 3), dtype=np.float32))
    deadline = time.monotonic() + 30
    while True:  # read every 5 s
        figures = [cache_metrics(server) for server in (a, b)]
        keys = redis_server.keys()
        if all(f["nv_cache_num_entries"] == keys for f in figures) and keys >= 1:
            break
        assert time.monotonic() < deadline, (figures, keys)
        time.sleep(0.5)
    info = redis_server.info()
    for f in figures:
        assert 0 < f["nv_cache_util"] < 1  # its used memory over its 64 MB maxmemory
        assert f["nv_cache_util"] == pytest.approx(info["used_memory"] / info["maxmemory"], rel=0.5)
    assert figures[0]["nv_cache_num_evictions"] == info["evicted_keys"]
    # Full: a smaller maxmemory and 4 MB written to it make redis evict; both servers say so.
    redis_server.cli("CONFIG", "SET", "maxmemory", "2mb")
    try:
        import redis

        client = redis.Redis(port=redis_server.port, socket_timeout=5)
        for i in range(64):
            client.set(f"filler:{i}", b"x" * 65536)
        client.close()
        evicted = redis_server.info()["evicted_keys"]
        assert evicted > 0
        deadline = time.monotonic() + 30
        while not all(cache_metrics(server)["nv_cache_num_evictions"] >= evicted for server in (a, b)):
            assert time.monotonic() < deadline
            time.sleep(0.5)
    finally:
        redis_server.cli("CONFIG", "SET", "maxmemory", "64mb")


def test_a_redis_that_stops_or_stalls_makes_requests_miss_never_fail(
    repo: Path, tmp_path: Path, frontend_processes: int
) -> None:
    redis_server = Redis(tmp_path)
    try:
        with running_server([repo], tmp_path / "server.log", *cache_flags(redis_server)) as server:
            values = np.array([[1.0, 2.0]], dtype=np.float32)
            infer(server, "cached", values)
            # Stalled: redis takes no command for 3 s; every lookup gives up after 300 ms, and the request runs.
            redis_server.cli("CLIENT", "PAUSE", "3000", "ALL")
            stalled = np.array([[3.0, 4.0]], dtype=np.float32)
            np.testing.assert_array_equal(infer(server, "cached", stalled), stalled)
            # The lookup that waited on redis gives up; under load another may first give up waiting for the pool's
            # one connection, which that lookup holds: either way a failure of the cache, not of the request.
            assert re.search(r"failed \((no answer in time|No connection available\.)\)", server.log())
            # Gone: stopped; requests are still answered, without the cache.
            time.sleep(3)
            redis_server.stop()
            for i in range(5):
                gone = np.array([[float(i), 9.0]], dtype=np.float32)
                np.testing.assert_array_equal(infer(server, "cached", gone), gone)
            log = server.log()
            assert log.count("requests are served without the cache until it answers") >= 1
            # Back: the same port again; after the pause the cache is used again.
            redis_server.start()
            deadline = time.monotonic() + 30
            repeat = np.array([[5.0, 6.0]], dtype=np.float32)
            while "answers again" not in server.log():
                np.testing.assert_array_equal(infer(server, "cached", repeat), repeat)
                assert time.monotonic() < deadline, server.log()[-2000:]
                time.sleep(0.2)
            assert "Traceback" not in server.log()
            failures = stats(server, "cached")["inference_stats"]["fail"]["count"]
            assert failures == 0
    finally:
        redis_server.stop()
