"""What one call sees (`calls.py`): its metadata, its timeout, its messages as they arrive, and its status."""

from __future__ import annotations

import grpc
import pytest

from modelhost.frontends.grpc.calls import (
    AbortError,
    MessageReader,
    call_metadata,
    message_prefix,
    parse_timeout,
    status_trailers,
)
from modelhost.frontends.grpc.calls import CallContext as GrpcCall


def test_binary_metadata_that_is_not_base64_ends_the_call_as_invalid() -> None:
    context = GrpcCall([(b"x-key-bin", b"abcde")])  # five characters: no base64 length
    with pytest.raises(AbortError) as aborted:
        context.invocation_metadata()
    assert aborted.value.code.name == "INVALID_ARGUMENT" and "x-key-bin" in aborted.value.message


def test_metadata_is_the_custom_headers_with_binary_values_decoded() -> None:
    headers = [
        (b":path", b"/t.S/M"),
        (b"content-type", b"application/grpc"),
        (b"grpc-timeout", b"1S"),
        (b"te", b"trailers"),
        (b"x-user", b"caf\xe9"),
        (b"x-key-bin", b"AAEC"),  # unpadded base64, as clients send it
    ]
    assert call_metadata(headers) == (("x-user", "café"), ("x-key-bin", b"\x00\x01\x02"))
    context = GrpcCall(headers)
    assert context.invocation_metadata() is context.invocation_metadata()  # built once


def test_grpc_timeout_in_each_unit_and_malformed() -> None:
    assert parse_timeout(b"2H") == 7200.0
    assert parse_timeout(b"20m") == pytest.approx(0.02)
    assert parse_timeout(b"5000000n") == pytest.approx(0.005)
    for bad in (b"", b"S", b"123456789S", b"10s", b"-1S", b"1.5S"):
        with pytest.raises(AbortError) as aborted:
            parse_timeout(bad)
        assert aborted.value.code is grpc.StatusCode.INVALID_ARGUMENT


def test_messages_are_cut_out_of_the_data_however_it_arrives() -> None:
    reader = MessageReader(None, max_size=100)
    data = message_prefix(3) + b"abc" + message_prefix(0) + message_prefix(5) + b"hello"
    assert reader.feed(data[:4]) == []
    assert reader.feed(data[4:13]) == [b"abc", b""]
    assert reader.feed(data[13:20]) == []
    with pytest.raises(AbortError) as cut:
        reader.finish()  # the client ended inside a message
    assert cut.value.code is grpc.StatusCode.INTERNAL
    assert reader.feed(data[20:]) == [b"hello"]
    reader.finish()
    with pytest.raises(AbortError) as large:
        MessageReader(None, max_size=4).feed(message_prefix(5))  # refused from its prefix alone
    assert large.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED


def test_a_status_as_trailers() -> None:
    assert status_trailers(grpc.StatusCode.OK, "") == [(b"grpc-status", b"0")]
    assert status_trailers(grpc.StatusCode.NOT_FOUND, "no model 'é' at 100%") == [
        (b"grpc-status", b"5"),
        (b"grpc-message", b"no model '%C3%A9' at 100%25"),
    ]
    assert status_trailers(grpc.StatusCode.UNAVAILABLE, "")[-1] == (b"grpc-retry-pushback-ms", b"1000")
