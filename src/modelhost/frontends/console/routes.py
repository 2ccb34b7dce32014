"""The console's routes on the HTTP port: `GET /` (the page), `GET /console/assets/<file>` (its script, styles and
uPlot, from the package) and `GET /console/compatibility` (the compatibility page of this server's version).

Every URL the page uses is relative, so it works unchanged behind a reverse proxy that serves the server under a
path prefix (`/prefix/` to `/`).
"""

from __future__ import annotations

import functools
import logging
from importlib import resources

from modelhost.engine_api import EngineAPI
from modelhost.frontends.console.page import render
from modelhost.frontends.console.settings import ConsoleSettings
from modelhost.frontends.http.messages import HttpRequest, HttpResponse, error_response
from modelhost.frontends.restrictions import Restrictions, refusal

log = logging.getLogger("modelhost.console")

_CONTENT_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".LICENSE": "text/plain; charset=utf-8",
}
_HTML = "text/html; charset=utf-8"
# The page is rendered per request (the state of the server); the assets change only with the package.
_NO_STORE = [("Cache-Control", "no-store")]
_ASSET_CACHE = [("Cache-Control", "max-age=300")]


@functools.cache
def _assets() -> dict[str, tuple[bytes, str]]:
    """Every asset the package ships, by file name: its bytes and content type (read once, at the first request
    for one). Only these names are served: a client's other names are not looked up, nor remembered."""
    folder = resources.files("modelhost.frontends.console").joinpath("assets")
    return {
        item.name: (item.read_bytes(), _CONTENT_TYPES["." + item.name.rsplit(".", 1)[-1]])
        for item in folder.iterdir()
        if item.is_file() and item.name.endswith(tuple(_CONTENT_TYPES))
    }


@functools.cache
def _compatibility_page() -> bytes:
    """docs/compatibility.md as HTML. The package carries the page itself (a link to docs/compatibility.md, which
    `modelhost compatibility` writes from the code and tests/e2e/test_compatibility.py checks), so serving it
    imports nothing of the engine or the CLI it is written from."""
    from markdown_it import MarkdownIt

    text = resources.files("modelhost.frontends.console").joinpath("compatibility.md").read_text("utf-8")
    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(text)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>modelhost: compatibility with Triton</title>"
        '<link rel="stylesheet" href="assets/console.css"></head>'
        f'<body class="compatibility"><nav><a href="../">Back to the console</a></nav>{body}</body></html>\n'
    ).encode()


# The API categories whose answers the page shows (the rest of its data is the console's own).
SHOWN_CATEGORIES = ("metadata", "health", "model-repository", "model-config", "statistics")


class ConsoleRoutes:
    def __init__(
        self, engine: EngineAPI, settings: ConsoleSettings, restrictions: Restrictions | None = None
    ) -> None:
        """`restrictions`: --http-restricted-api; the page leaves out what a request may not read through the
        API."""
        self.engine = engine
        self.settings = settings
        self.restrictions = restrictions or {}

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        path = request.path
        if request.method != "GET":
            # Only GET is the console's: anything else at these paths stays tritonserver's 404.
            return error_response(404, "Not Found")
        if path == "/":
            host = request.headers.get("host", "") or "localhost:8000"
            refused = {
                category: why
                for category in SHOWN_CATEGORIES
                if (why := refusal(self.restrictions, category, request.headers.get))
            }
            page = await render(self.engine, self.settings, host, refused)
            return HttpResponse(200, page.encode(), _HTML, list(_NO_STORE))
        if path == "/console/compatibility":
            return HttpResponse(200, _compatibility_page(), _HTML, list(_ASSET_CACHE))
        asset = (
            _assets().get(path.removeprefix("/console/assets/"))
            if path.startswith("/console/assets/")
            else None
        )
        if asset is not None:
            return HttpResponse(200, asset[0], asset[1], list(_ASSET_CACHE))
        return error_response(404, "Not Found")
