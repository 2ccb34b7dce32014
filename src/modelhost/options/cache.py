"""--cache-config: the response cache a server uses (local, with a byte budget, or a redis server), as settings
the engine's caches (engine/response_cache.py, engine/redis_cache.py) are built from."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CacheSettings:
    size: int  # bytes


@dataclass(frozen=True, slots=True)
class RedisSettings:
    """Triton's redis cache options (its redis_cache repository's README), as `--cache-config redis,<key>=<value>`:
    times in milliseconds; TLS is on when any of its files (or `sni`) is given."""

    host: str
    port: int
    user: str = "default"
    password: str = ""
    db: int = 0
    connect_timeout: int = 0  # 0: wait forever (Triton); here each lookup still gives up after `timeout_s`
    socket_timeout: int = 0
    pool_size: int = 1
    wait_timeout: int = 100  # for a connection from the pool
    cert: str = ""
    key: str = ""
    cacert: str = ""
    cacert_dir: str = ""
    sni: str = ""

    @property
    def tls(self) -> bool:
        return bool(self.cert or self.key or self.cacert or self.cacert_dir or self.sni)


_REDIS_INTEGERS = ("port", "db", "connect_timeout", "socket_timeout", "pool_size", "wait_timeout")
_REDIS_STRINGS = ("host", "user", "password", "cert", "key", "cacert", "cacert_dir", "sni")


def parse_cache_config(
    values: list[str], environ: dict[str, str] | None = None
) -> CacheSettings | RedisSettings | None:
    """`--cache-config <cache>,<setting>=<value>` (repeatable); None when no cache is asked for. Raises ValueError
    with a message for the command line. The redis user and password default to TRITONCACHE_REDIS_USERNAME and
    TRITONCACHE_REDIS_PASSWORD in `environ`, as in Triton."""
    size: int | None = None
    redis: dict[str, str] = {}
    for value in values:
        cache, _, setting = value.partition(",")
        key, equals, raw = setting.partition("=")
        if cache not in ("local", "redis") or not equals:
            raise ValueError(
                f"invalid --cache-config '{value}': expected local,size=<bytes> or redis,<setting>=<value>"
            )
        if cache == "redis":
            if key not in _REDIS_INTEGERS + _REDIS_STRINGS:
                raise ValueError(
                    f"unknown redis cache setting '{key}' (the redis cache takes "
                    f"{', '.join(sorted(_REDIS_INTEGERS + _REDIS_STRINGS))})"
                )
            if key in _REDIS_INTEGERS and not raw.isdigit():
                raise ValueError(f"invalid redis cache {key} '{raw}': expected a whole number")
            redis[key] = raw
            continue
        if key != "size":
            raise ValueError(f"unknown local cache setting '{key}' (the local cache takes size=<bytes>)")
        if not raw.isdigit():
            raise ValueError(f"invalid local cache size '{raw}': expected a number of bytes")
        size = int(raw)
    if redis and size is not None:
        raise ValueError("--cache-config names two caches (local and redis); a server uses one")
    if not redis:
        return None if size is None else CacheSettings(size)
    if "host" not in redis or "port" not in redis:
        # Triton's message.
        raise ValueError(
            "Failed to initialize RedisCache, didn't specify address. Must at a minimum specify 'host' and 'port' "
            "in the configuration - e.g. tritonserver --cache-config redis,host=redis --cache-config "
            "redis,port=6379 --model-repository=/models ..."
        )
    environ = environ if environ is not None else {}
    redis.setdefault("user", environ.get("TRITONCACHE_REDIS_USERNAME", "default"))
    if "TRITONCACHE_REDIS_PASSWORD" in environ:
        redis.setdefault("password", environ["TRITONCACHE_REDIS_PASSWORD"])
    fields = {key: int(raw) if key in _REDIS_INTEGERS else raw for key, raw in redis.items()}
    return RedisSettings(**fields)  # type: ignore[arg-type]
