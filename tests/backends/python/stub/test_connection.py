"""The stub's socket: calls run one at a time in order, replies go to the thread waiting for them, free lists
and cancellations are handled by whichever thread reads."""

from __future__ import annotations

import threading
from typing import Any

from backends.python.stub.server_end import Identity, ServerEnd


def test_a_reply_reaches_the_thread_that_waits_for_it() -> None:
    server = ServerEnd(Identity())
    try:
        replies: list[dict[str, Any]] = []
        waiter = threading.Thread(target=lambda: replies.append(server.stub.connection.request({"op": "metric_value"})))
        waiter.start()
        asked = server.next_message()
        assert asked["op"] == "metric_value"
        server.send({"op": "reply", "id": asked["id"], "value": 2.5})
        waiter.join(10)
        assert replies == [{"op": "reply", "id": asked["id"], "value": 2.5}]
    finally:
        server.close()


def test_a_call_that_arrives_while_one_runs_waits_its_turn() -> None:
    order: list[str] = []
    server = ServerEnd(Identity())
    connection = server.stub.connection
    try:

        def first(message: dict[str, Any]) -> None:
            order.append("first")
            connection.handle({"op": "second"})  # read meanwhile (by a thread waiting for a reply, say)
            order.append("first done")

        connection.handlers.update({"first": first, "second": lambda message: order.append("second")})
        connection.handle({"op": "first"})
        assert order == ["first", "first done"]
        server.send({"op": "free"})  # serve() runs what was kept, then reads on; a closed socket ends it
        server.sock.close()
        connection.serve()
        assert order == ["first", "first done", "second"]
    finally:
        server.close()


def test_cancellations_and_free_lists_are_not_calls() -> None:
    server = ServerEnd(Identity())
    connection = server.stub.connection
    try:
        block = connection.arena.alloc(4096)
        connection.handle({"op": "cancel", "key": 4, "free": [block]})
        assert connection.cancelled == {4}
        assert connection.arena.in_use() == 0
    finally:
        server.close()
