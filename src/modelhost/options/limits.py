"""What one connection of each protocol may hold and for how long: the HTTP and gRPC limits the frontends are
built with, their defaults (tritonserver's, or gRPC's), and the flag that sets each. ServerOptions takes its
defaults from here and makes them (`http_limits()`, `grpc_limits()`)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_HTTP_MAX_INPUT_SIZE = 1 << 26  # 64 MiB, as tritonserver
DEFAULT_HTTP_MAX_HEADER_SIZE = 1 << 16  # 64 KiB: the request line and headers together
DEFAULT_GRPC_MAX_DECOMPRESSED_SIZE = 1 << 26  # 64 MiB, as --http-max-input-size


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What one connection may hold and for how long (each has a flag: docs/protocols.md)."""

    # Bytes of a request body, also after decompression (--http-max-input-size).
    max_body: int = DEFAULT_HTTP_MAX_INPUT_SIZE
    # Bytes of a request line and headers together (--http-max-header-size): httptools holds them whole until
    # they end, so they are bounded, as the body is.
    max_head: int = DEFAULT_HTTP_MAX_HEADER_SIZE
    # Seconds a keep-alive connection may wait for its next request (--http-idle-timeout-secs): longer than the
    # 60 s of common load balancers, so that they, not the server, close idle connections.
    idle_timeout: float = 75.0
    # Seconds a request's line and headers may take to arrive whole, and its body may go without a byte
    # (--http-request-timeout-secs): a client that trickles its request (slowloris) or stops halfway (a
    # Content-Length of 1 GB with a small body) does not hold its connection for ever.
    request_timeout: float = 30.0
    # Open connections of this process (--http-max-connections); one more is answered 503 and closed.
    max_connections: int = 10_000


@dataclass(frozen=True, slots=True)
class GrpcLimits:
    """What one connection may send and for how long (each has a flag: docs/grpc.md)."""

    max_message_size: int = 2**31 - 1  # bytes of one message as sent, each way (Triton's limit)
    # Bytes a compressed message may inflate to (--grpc-max-decompressed-size).
    max_decompressed_size: int = DEFAULT_GRPC_MAX_DECOMPRESSED_SIZE
    # Seconds a connection may stay without a call before it is sent GOAWAY and closed (--grpc-idle-timeout-secs):
    # clients reconnect by themselves at their next call.
    idle_timeout: float = 300.0
    # Seconds a unary call's request may go without a byte before it is answered DEADLINE_EXCEEDED, and a new
    # connection may take to start its first call (--grpc-request-timeout-secs).
    request_timeout: float = 30.0
    # Open connections of this process (--grpc-max-connections); one more is closed at once.
    max_connections: int = 10_000
    # Keepalive and ping policy, tritonserver's flags with gRPC's defaults (milliseconds): the server pings a
    # connection silent for `keepalive_time` (only while it has calls, unless `keepalive_permit_without_calls`),
    # at most `max_pings_without_data` times between answers (0: no limit), and closes it when a ping is not
    # acknowledged within `keepalive_timeout`. A client's pings closer than `min_recv_ping_interval` (2 hours
    # while it has no call, unless permitted) are strikes; past `max_ping_strikes` (0: any number) it is sent
    # GOAWAY ENHANCE_YOUR_CALM "too_many_pings".
    keepalive_time: int = 7_200_000
    keepalive_timeout: int = 20_000
    keepalive_permit_without_calls: bool = False
    max_pings_without_data: int = 2
    min_recv_ping_interval: int = 300_000
    max_ping_strikes: int = 2
    # GOAWAY once a connection is this old, then closed after the grace (None: never).
    max_connection_age: int | None = None
    max_connection_age_grace: int | None = None
