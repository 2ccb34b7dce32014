"""The Vertex AI routes, as Triton's Vertex AI server answers them.

- a path matching AIP_HEALTH_ROUTE (whole) is the server's readiness (`GET /v2/health/ready`);
- a path matching AIP_PREDICT_ROUTE is an inference request to the default model, or, with the header
  `X-Vertex-Ai-Triton-Redirect: <endpoint>`, a POST standing for one of the KServe v2 endpoints that read: server
  metadata and health, model metadata, readiness, config, statistics and inference, `/metrics`, the repository
  index and the shared-memory status. Endpoints that change the server (model load and unload, shared-memory
  registration) are refused with 403: they are the HTTP port's;
- anything else is 400.

Binary tensors come with `Content-Type: application/vnd.vertex-ai-triton.binary+json;json-header-size=N` instead of
Inference-Header-Content-Length; answers are the HTTP port's. Bodies are never compressed, as in Triton. Every
answer goes through the HTTP routes (decoding, encoding, --http-restricted-api, --http-max-input-size).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable
from urllib.parse import quote

from modelhost.errors import ModelhostError
from modelhost.frontends.http.binary_mime import as_kserve
from modelhost.frontends.http.messages import HttpRequest, HttpResponse, error_response
from modelhost.frontends.http.routes import (
    MODEL,
    REPOSITORY,
    REPOSITORY_CONTROL,
    SHARED_MEMORY,
    HttpRoutes,
)
from modelhost.frontends.http.statuses import failure_response
from modelhost.frontends.vertex_ai.settings import VertexAiSettings

log = logging.getLogger("modelhost.vertex_ai")

BINARY_CONTENT_TYPE = "application/vnd.vertex-ai-triton.binary+json;json-header-size="
REDIRECT = "x-vertex-ai-triton-redirect"

# The endpoints a redirect may name, by their patterns in the HTTP port's route table: each is served with the
# method of its route.
_SERVED = frozenset(
    {
        "/v2",
        "/v2/health/live",
        "/v2/health/ready",
        "/v2/models/stats",
        MODEL,
        MODEL + "/ready",
        MODEL + "/config",
        MODEL + "/stats",
        MODEL + "/infer",
        SHARED_MEMORY + "/status",
        REPOSITORY + "/index",
    }
)
# The endpoints that change the server: refused (403), they are the HTTP port's.
_REFUSED = frozenset({SHARED_MEMORY + "/register", SHARED_MEMORY + "/unregister", REPOSITORY_CONTROL})
_NOT_COMPRESSED = ("content-encoding", "accept-encoding")


class VertexAiRoutes:
    def __init__(
        self, http: HttpRoutes, settings: VertexAiSettings, default_model: str, metrics: Callable[[], bytes]
    ) -> None:
        """`metrics`: the server's metrics (Prometheus text), as its metrics port answers it."""
        self.http = http
        self.predict = re.compile(settings.predict_route)
        self.health = re.compile(settings.health_route)
        self.default_model = default_model
        self.metrics = metrics

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            return await self._route(request)
        except ModelhostError as e:
            return failure_response(request.method, request.path, e)

    async def _route(self, request: HttpRequest) -> HttpResponse:
        if self.health.fullmatch(request.path):
            return await self.http(dataclasses.replace(request, path="/v2/health/ready", query=""))
        if not self.predict.fullmatch(request.path):
            return error_response(400, f"'{request.path}' is neither the predict nor the health route")
        request = as_kserve(_identity(request), BINARY_CONTENT_TYPE)
        target = request.headers.get(REDIRECT)
        if target is None:
            path = f"/v2/models/{quote(self.default_model, safe='')}/infer"
            return await self.http(dataclasses.replace(request, path=path, query=""))
        if request.method != "POST":
            return error_response(405, "Method Not Allowed")
        endpoint = "/" + target
        log.debug("redirecting Vertex AI request: %s", endpoint)
        method = self._method(endpoint)
        if method == "metrics":
            return HttpResponse(200, self.metrics(), content_type="text/plain; charset=utf-8; version=0.0.4")
        if method == "refused":
            return error_response(403, f"'{endpoint}' is not served through Vertex AI's redirect")
        if method == "":
            return error_response(400, f"'{endpoint}' is not an endpoint Vertex AI's redirect serves")
        return await self.http(dataclasses.replace(request, method=method, path=endpoint, query=""))

    def _method(self, endpoint: str) -> str:
        """The HTTP method the endpoint is served with; "metrics", "refused" (403) or "" (400)."""
        if endpoint == "/metrics":
            return "metrics"
        matched = self.http.router.match("POST", endpoint)
        if matched is None:
            return ""
        resource = matched[0]
        if resource.pattern in _REFUSED:
            return "refused"
        if resource.pattern in _SERVED:
            return next(iter(resource.endpoints))  # its route's one method
        return ""


def _identity(request: HttpRequest) -> HttpRequest:
    """Vertex AI's bodies are never compressed: its encoding headers are not read."""
    headers = {k: v for k, v in request.headers.items() if k not in _NOT_COMPRESSED}
    return dataclasses.replace(request, headers=headers)


