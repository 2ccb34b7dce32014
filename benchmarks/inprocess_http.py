"""The in-process cost of one binary HTTP inference request through the HTTP routes and the engine: no sockets, no
load generator, so that a noisy machine matters less when two builds are compared.

    .venv/bin/python benchmarks/inprocess_http.py REPO N LABEL          # REPO holds the example `simple`
    PYTHONPATH=/old/checkout/src .venv/bin/python benchmarks/inprocess_http.py REPO N old

It also runs a checkout from before the engine seam (modelhost.server.Server, modelhost.registry).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import numpy as np

try:
    from modelhost.backends.api import BackendServices
    from modelhost.engine.engine import Engine
    from modelhost.engine.registry.entries import LoadSettings
    from modelhost.engine.registry.registry import ModelRegistry
except ImportError:
    from modelhost.registry import LoadSettings, ModelRegistry
    from modelhost.server import Server as Engine

    from modelhost.backends.api import BackendServices
try:
    from modelhost.frontends.http.messages import HttpRequest
except ImportError:
    from modelhost.frontends.http.protocol import HttpRequest
from modelhost.frontends.http.routes import HttpRoutes
from modelhost.repository.sources import open_repository

repo = sys.argv[1]
N = int(sys.argv[2])


async def main():
    services = BackendServices(loop=asyncio.get_running_loop())
    reg = ModelRegistry([open_repository(repo)], LoadSettings(), "none", services)
    engine = Engine(reg)  # the backends' handle on the engine: services.engine
    await reg.start()
    routes = HttpRoutes(engine, 1 << 26)
    a = np.arange(16, dtype=np.int32).tobytes()
    header = json.dumps(
        {
            "inputs": [
                {"name": n, "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}}
                for n in ("INPUT0", "INPUT1")
            ],
            "outputs": [{"name": n, "parameters": {"binary_data": True}} for n in ("OUTPUT0", "OUTPUT1")],
        }
    ).encode()
    body = header + a + a
    headers = {
        "inference-header-content-length": str(len(header)),
        "content-type": "application/octet-stream",
    }
    req = HttpRequest("POST", "/v2/models/simple/infer", "", headers, body)
    for _ in range(2000):
        r = await routes(req)
    assert r.status == 200, r.body
    best = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(N):
            await routes(req)
        best.append((time.perf_counter() - t) / N * 1e6)
    print(f"{sys.argv[3]}: us/request min {min(best):.1f} median {sorted(best)[2]:.1f}")
    reg.close()


asyncio.run(main())
