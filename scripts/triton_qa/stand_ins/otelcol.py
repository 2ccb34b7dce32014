"""Stand-in for the OpenTelemetry collector (`otelcol` v0.91) that qa/L0_trace downloads, for its
trace-config.yaml: an OTLP/HTTP receiver, the batch processor (a batch leaves at send_batch_size spans or when its
`timeout` timer fires) and
the file exporter (one line of OTLP JSON per batch, the file truncated at start).

    python otelcol.py --config ./trace-config.yaml

Only what that configuration uses is there: POST /v1/traces with a protobuf or JSON ExportTraceServiceRequest
(gzip accepted); ids written in hex and enums as numbers, as the collector's JSON does.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import re
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2


def read_config(path: str) -> tuple[str, int, str, int, float]:
    with open(path) as f:
        text = f.read()
    endpoint = re.search(r"endpoint:\s*([^\s]+):(\d+)", text)
    file_path = re.search(r"path:\s*([^\s]+)", text)
    batch = re.search(r"send_batch_size:\s*(\d+)", text)
    timeout = re.search(r"timeout:\s*(\d+)s", text)
    return (
        endpoint.group(1) if endpoint else "0.0.0.0",
        int(endpoint.group(2)) if endpoint else 4318,
        file_path.group(1) if file_path else "./collected_traces.json",
        int(batch.group(1)) if batch else 8192,
        float(timeout.group(1)) if timeout else 0.2,
    )


def _hex_ids(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str):
                out[k] = base64.b64decode(v).hex() if v else ""
            else:
                out[k] = _hex_ids(v)
        if "spanId" in out and "parentSpanId" not in out:
            out["parentSpanId"] = ""
        return out
    if isinstance(node, list):
        return [_hex_ids(v) for v in node]
    return node


class Batcher:
    def __init__(self, path: str, batch_size: int, timeout: float) -> None:
        self.path = path
        self.batch_size = batch_size
        self.timeout = timeout
        self.lock = threading.Lock()
        self.resource_spans: list[Any] = []
        self.count = 0
        # The batch processor's timer: it fires every `timeout` seconds from the start, and starts over
        # when a batch leaves because it is full.
        self.deadline = time.monotonic() + timeout
        open(path, "w").close()
        threading.Thread(target=self._timer, daemon=True).start()

    def add(self, resource_spans: list[Any]) -> None:
        n = sum(len(ss.get("spans", [])) for rs in resource_spans for ss in rs.get("scopeSpans", []))
        with self.lock:
            self.resource_spans += resource_spans
            self.count += n
            if self.count >= self.batch_size:
                self._flush()
                self.deadline = time.monotonic() + self.timeout

    def _flush(self) -> None:
        if not self.resource_spans:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps({"resourceSpans": self.resource_spans}, separators=(",", ":")) + "\n")
        self.resource_spans = []
        self.count = 0

    def _timer(self) -> None:
        while True:
            time.sleep(0.1)
            with self.lock:
                if time.monotonic() >= self.deadline:
                    self._flush()
                    self.deadline = time.monotonic() + self.timeout


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    ns = parser.parse_args()
    host, port, path, batch_size, timeout = read_config(ns.config)
    batcher = Batcher(path, batch_size, timeout)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding", "") == "gzip":
                body = gzip.decompress(body)
            request = trace_service_pb2.ExportTraceServiceRequest()
            try:
                if "json" in self.headers.get("Content-Type", ""):
                    json_format.Parse(body, request)
                else:
                    request.ParseFromString(body)
            except Exception as e:
                self.send_response(400)
                self.end_headers()
                self.wfile.write(str(e).encode())
                return
            as_dict = json_format.MessageToDict(request, use_integers_for_enums=True)
            batcher.add(_hex_ids(as_dict.get("resourceSpans", [])))
            reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

    server = ThreadingHTTPServer((host, port), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever()
    finally:
        with batcher.lock:
            batcher._flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
