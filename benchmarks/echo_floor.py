"""The floor of a Python HTTP server's cost per inference request: a bare httptools + uvloop server that parses a
KServe v2 identity request (binary tensors or JSON) and answers its tensor as the output, with nothing else (no
routing, engine, statistics or checks). What cpu_split.py --table compares every layer against.

    .venv/bin/python benchmarks/echo_floor.py --port 9000
"""

from __future__ import annotations

import argparse
import asyncio
from typing import cast

import httptools
import orjson
import uvloop


class EchoProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.header_length = b""
        self.body: list[bytes] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's: not a subclass, the same methods

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"inference-header-content-length":
            self.header_length = value

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body = b"".join(self.body)
        self.body = []
        if self.header_length:
            length = int(self.header_length)
            self.header_length = b""
            request = orjson.loads(body[:length])
            tensors = body[length:]
            outputs = [
                {
                    "name": f"OUTPUT{i}",
                    "datatype": tensor["datatype"],
                    "shape": tensor["shape"],
                    "parameters": {"binary_data_size": tensor["parameters"]["binary_data_size"]},
                }
                for i, tensor in enumerate(request["inputs"])
            ]
            header = orjson.dumps({"model_name": "identity", "model_version": "1", "outputs": outputs})
            payload = header + tensors
            kind = (
                b"application/octet-stream\r\nInference-Header-Content-Length: " + str(len(header)).encode()
            )
        else:
            request = orjson.loads(body)
            outputs = [
                {"name": f"OUTPUT{i}", "datatype": t["datatype"], "shape": t["shape"], "data": t["data"]}
                for i, t in enumerate(request["inputs"])
            ]
            payload = orjson.dumps({"model_name": "identity", "model_version": "1", "outputs": outputs})
            kind = b"application/json"
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: " + kind + b"\r\nContent-Length: " + str(len(payload)).encode()
            + b"\r\n\r\n" + payload
        )  # fmt: skip


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(EchoProtocol, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, required=True)
    uvloop.run(serve(parser.parse_args().port))


if __name__ == "__main__":
    main()
