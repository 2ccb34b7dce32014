"""The response cache in a redis server (`--cache-config redis,host=<h> --cache-config redis,port=<p>`, Triton's
options): several servers share one cache, so a response computed by one is served by all.

- Same keys as the local cache (response_cache.cache_key), under `modelhost:response:`; the value is the
  response's outputs (name, datatype, shape, bytes) as msgpack. No expiry: redis's own `maxmemory` and eviction
  policy bound the cache (`maxmemory-policy allkeys-lru` makes it an LRU cache like the local one).
- A redis that is down or slow never fails a request and never holds it past the cache's timeout: a lookup that
  does not answer within `socket_timeout` (1 s when that is 0, Triton's "forever") is a miss; after a failure the
  cache is skipped for a second, so that an outage costs each request nothing; the outage and the recovery are
  logged once each.
- Inserts do not hold the response back: they are sent in the background, at most `pool_size x 4` at once (more
  are dropped, and counted), so memory stays bounded whatever redis does.
- The entries, utilisation and evictions of `nv_cache_*` are redis's own (its INFO, read every 5 s in the
  background, one command): the keys of its database, its memory used over `maxmemory` (over the machine's memory
  when it has none), the keys it evicted. They describe the shared cache, so every server sharing it reports the
  same; the lookups, hits, misses and durations are this server's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import msgspec
import numpy as np

from modelhost.engine.cache_counters import CacheCounters
from modelhost.errors import Unsupported
from modelhost.options.cache import RedisSettings
from modelhost.tensor_codec import array_from_raw, raw_bytes
from modelhost.types import InferenceRequest, InferenceResponse, Tensor

log = logging.getLogger("modelhost.cache")

KEY_PREFIX = b"modelhost:response:"
_DEFAULT_TIMEOUT_S = 1.0
_BACKOFF_S = 1.0  # after a failure, the cache is skipped this long
_PENDING_PER_CONNECTION = 4
_INFO_EVERY_S = 5.0


def _client(settings: RedisSettings) -> Any:
    try:
        import redis.asyncio as aioredis
    except ModuleNotFoundError as e:
        raise Unsupported(
            "the redis response cache needs the Python package 'redis', which is not installed; install it with: "
            "pip install 'modelhost[redis]'"
        ) from e
    if settings.sni and settings.sni != settings.host:
        raise Unsupported(
            f"the redis cache's sni '{settings.sni}' must be its host '{settings.host}': the client sends the host "
            "as the TLS server name"
        )
    tls: dict[str, Any] = {}
    if settings.tls:
        tls = {
            "connection_class": aioredis.SSLConnection,
            "ssl_certfile": settings.cert or None,
            "ssl_keyfile": settings.key or None,
            "ssl_ca_certs": settings.cacert or None,
            "ssl_ca_path": settings.cacert_dir or None,
            "ssl_check_hostname": bool(settings.sni),
        }
    pool = aioredis.BlockingConnectionPool(
        host=settings.host,
        port=settings.port,
        username=settings.user or None,
        password=settings.password or None,
        db=settings.db,
        socket_connect_timeout=settings.connect_timeout / 1000 or None,
        socket_timeout=settings.socket_timeout / 1000 or None,
        max_connections=max(1, settings.pool_size),
        timeout=settings.wait_timeout / 1000,
        **tls,
    )
    return aioredis.Redis(connection_pool=pool)


def encode_outputs(outputs: list[Tensor]) -> bytes:
    return msgspec.msgpack.encode([[t.name, t.datatype, list(t.shape), _payload(t)] for t in outputs])


def _payload(tensor: Tensor) -> bytes | memoryview:
    """A tensor's bytes for the entry: numbers as a view of the array (msgpack copies them once, into the
    entry), BYTES serialised element by element."""
    if tensor.datatype == "BYTES":
        return raw_bytes(tensor.datatype, tensor.data)
    return np.ascontiguousarray(tensor.data).reshape(-1).view(np.uint8).data


def decode_outputs(value: bytes) -> list[Tensor]:
    outputs = []
    for name, datatype, shape, data in msgspec.msgpack.decode(value):
        array = array_from_raw(name, datatype, shape, memoryview(data))
        array.flags.writeable = False
        outputs.append(Tensor(name, datatype, shape, array))
    return outputs


class RedisCache:
    __slots__ = (
        "_pending",
        "_skip_until",
        "_watch",
        "address",
        "client",
        "counters",
        "down",
        "dropped_inserts",
        "entries",
        "evictions",
        "failures",
        "max_pending",
        "settings",
        "timeout_s",
        "utilization",
    )

    def __init__(self, settings: RedisSettings) -> None:
        self.settings = settings
        self.address = f"{settings.host}:{settings.port}"
        self.client = _client(settings)
        timeouts = [t for t in (settings.socket_timeout, settings.connect_timeout) if t > 0]
        self.timeout_s = max(timeouts) / 1000 if timeouts else _DEFAULT_TIMEOUT_S
        self.max_pending = max(1, settings.pool_size) * _PENDING_PER_CONNECTION
        self._pending: set[asyncio.Task[None]] = set()
        self._skip_until = 0.0
        self.down = False
        # Counters, as the local cache's (nv_cache_*), plus what the local cache cannot have.
        self.counters = CacheCounters()
        self.failures = 0
        self.dropped_inserts = 0
        # Redis's own figures, from its INFO (see the module's docstring).
        self.entries = 0
        self.utilization = 0.0
        self.evictions = 0
        self._watch: asyncio.Task[None] | None = None

    async def check(self) -> None:
        """At start: say whether redis answers (a server that cannot reach it serves uncached meanwhile), and
        begin reading its figures."""
        try:
            await asyncio.wait_for(self.client.ping(), self.timeout_s)
        except Exception as e:  # any failure of the client: the cache is only an optimisation
            self._failed(e)
        else:
            log.info("response cache: redis at %s", self.address)
        self._watch = asyncio.get_running_loop().create_task(self._read_info())

    async def _read_info(self) -> None:
        while True:
            try:
                info = await asyncio.wait_for(self.client.info(), self.timeout_s)
            except Exception:  # a redis that is down: the lookups say so, once; its last figures stay
                pass
            else:
                self._take_info(info)
            await asyncio.sleep(_INFO_EVERY_S)

    def _take_info(self, info: dict[str, Any]) -> None:
        keyspace = info.get(f"db{self.settings.db}", {})
        self.entries = int(keyspace.get("keys", 0)) if isinstance(keyspace, dict) else 0
        limit = int(info.get("maxmemory", 0)) or int(info.get("total_system_memory", 0))
        self.utilization = int(info.get("used_memory", 0)) / limit if limit else 0.0
        self.evictions = int(info.get("evicted_keys", 0))

    async def lookup(self, key: bytes, request: InferenceRequest, version: str) -> InferenceResponse | None:
        started = time.perf_counter_ns()
        value = None
        if time.monotonic() >= self._skip_until:
            try:
                value = await asyncio.wait_for(self.client.get(KEY_PREFIX + key), self.timeout_s)
            except Exception as e:
                self._failed(e)
            else:
                self._answered()
        outputs = None
        if value is not None:
            try:
                outputs = decode_outputs(value)
            except Exception as e:  # not ours, or written by another version: a miss
                log.warning("response cache: an entry in redis could not be read (%s); treated as a miss", e)
        self.counters.looked_up(started, hit=outputs is not None)
        if outputs is None:
            return None
        return InferenceResponse(request.model_name, version, request.id, outputs)

    def insert(self, key: bytes, response: InferenceResponse) -> None:
        if time.monotonic() < self._skip_until:
            return
        if len(self._pending) >= self.max_pending:
            self.dropped_inserts += 1
            return
        started = time.perf_counter_ns()
        value = encode_outputs(response.outputs)
        self.counters.inserted(started)
        task = asyncio.get_running_loop().create_task(self._set(KEY_PREFIX + key, value))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _set(self, key: bytes, value: bytes) -> None:
        started = time.perf_counter_ns()
        try:
            await asyncio.wait_for(self.client.set(key, value), self.timeout_s)
        except Exception as e:
            self._failed(e)
        else:
            self._answered()
        self.counters.inserted(started)

    def _failed(self, e: BaseException) -> None:
        self.failures += 1
        self._skip_until = time.monotonic() + _BACKOFF_S
        if not self.down:
            self.down = True
            reason = "no answer in time" if isinstance(e, TimeoutError) else str(e) or type(e).__name__
            log.warning(
                "response cache: redis at %s failed (%s); requests are served without the cache until it answers",
                self.address,
                reason,
            )

    def _answered(self) -> None:
        if self.down:
            self.down = False
            log.info("response cache: redis at %s answers again", self.address)

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        for task in list(self._pending):
            task.cancel()
        await asyncio.gather(*self._pending, return_exceptions=True)
        await self.client.aclose()

    def render(self) -> list[str]:
        """The local cache's families: this server's counts, redis's figures."""
        return self.counters.render(self.utilization, self.entries, self.evictions)


__all__ = ["KEY_PREFIX", "RedisCache", "decode_outputs", "encode_outputs"]
