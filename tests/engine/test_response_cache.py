"""The response cache's keys, budget and eviction, and its flag."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from modelhost.engine.redis_cache import decode_outputs, encode_outputs
from modelhost.engine.response_cache import ResponseCache, cache_key
from modelhost.options.cache import CacheSettings, RedisSettings, parse_cache_config
from modelhost.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor


def request(values: list[float], outputs: tuple[str, ...] = ()) -> InferenceRequest:
    data = np.array([values], dtype=np.float32)
    return InferenceRequest(
        "m",
        inputs=[Tensor("X", "FP32", list(data.shape), data)],
        outputs=[RequestedOutput(o) for o in outputs],
    )


def response(nbytes: int) -> InferenceResponse:
    data = np.zeros(nbytes // 4, dtype=np.float32)
    return InferenceResponse("m", "1", "", [Tensor("Y", "FP32", list(data.shape), data)])


def lookup(cache: ResponseCache, key: bytes, req: InferenceRequest, version: str) -> InferenceResponse | None:
    return asyncio.run(cache.lookup(key, req, version))


def test_keys_differ_by_inputs_shape_and_requested_outputs() -> None:
    base = cache_key("m", "1", request([1, 2]))
    assert base == cache_key("m", "1", request([1, 2]))
    assert base != cache_key("m", "1", request([1, 3]))
    assert base != cache_key("m", "2", request([1, 2]))
    assert base != cache_key("m", "1", request([1, 2], ("Y",)))


def test_least_recently_used_answers_are_evicted_first() -> None:
    cache = ResponseCache(CacheSettings(3000))
    keys = [cache_key("m", "1", request([i])) for i in range(3)]
    cache.insert(keys[0], response(1000))
    cache.insert(keys[1], response(1000))
    assert lookup(cache, keys[0], request([0]), "1") is not None  # 0 is now the most recent
    cache.insert(keys[2], response(1000))  # over budget: 1 goes
    assert lookup(cache, keys[1], request([1]), "1") is None
    assert lookup(cache, keys[0], request([0]), "1") is not None
    assert cache.evictions == 1 and cache.counters.hits == 2 and cache.counters.misses == 1


def test_an_answer_larger_than_the_budget_is_not_kept_and_answers_are_read_only() -> None:
    cache = ResponseCache(CacheSettings(1000))
    cache.insert(b"big", response(4000))
    assert len(cache) == 0
    cache.insert(b"small", response(16))
    hit = lookup(cache, b"small", request([0]), "1")
    assert hit is not None and not hit.outputs[0].data.flags.writeable


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["redis,host=h"], "didn't specify address. Must at a minimum specify 'host' and 'port'"),
        (["redis,host=h", "redis,port=x"], "invalid redis cache port 'x'"),
        (["redis,hostname=h"], "unknown redis cache setting 'hostname'"),
        (["local,size=100", "redis,host=h", "redis,port=1"], "names two caches"),
        (["local,size=abc"], "invalid local cache size"),
        (["local,color=red"], "unknown local cache setting"),
        (["other,size=1"], "expected local,size=<bytes>"),
    ],
)
def test_bad_cache_config(values: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_cache_config(values)


def test_cache_config() -> None:
    assert parse_cache_config([]) is None
    assert parse_cache_config(["local,size=1048576"]) == CacheSettings(1048576)


def test_redis_cache_config() -> None:
    settings = parse_cache_config(
        ["redis,host=cache", "redis,port=6380", "redis,socket_timeout=200", "redis,cacert=/ca.pem"],
        {"TRITONCACHE_REDIS_USERNAME": "u", "TRITONCACHE_REDIS_PASSWORD": "p"},
    )
    assert settings == RedisSettings(
        host="cache", port=6380, user="u", password="p", socket_timeout=200, cacert="/ca.pem"
    )
    assert isinstance(settings, RedisSettings) and settings.tls
    given = parse_cache_config(
        ["redis,host=h", "redis,port=1", "redis,password=given"], {"TRITONCACHE_REDIS_PASSWORD": "p"}
    )
    assert isinstance(given, RedisSettings) and given.password == "given" and given.user == "default"
    assert not given.tls and given.wait_timeout == 100  # Triton's default


def test_redis_entries_keep_every_datatype() -> None:
    outputs = [
        Tensor("F", "FP32", [2, 2], np.arange(4, dtype=np.float32).reshape(2, 2)),
        Tensor("B", "BYTES", [3], np.array([b"a", b"", b"\x00xyz"], dtype=object)),
        Tensor("Q", "BOOL", [1], np.array([True])),
    ]
    decoded = decode_outputs(encode_outputs(outputs))
    for before, after in zip(outputs, decoded, strict=True):
        assert (after.name, after.datatype, after.shape) == (before.name, before.datatype, before.shape)
        np.testing.assert_array_equal(after.data, before.data)
        assert not after.data.flags.writeable
