"""The console's routes and page against the fake engine: what the page holds, what a restriction leaves out,
the assets, the answers to bad requests (404, as tritonserver, for any method but GET), and the command lines it
offers (which modelhost perf and modelhost tune accept)."""

from __future__ import annotations

import asyncio
import html
import shlex

import orjson
import pytest

from fake_engine import FakeEngine
from modelhost.frontends.console.page import commands
from modelhost.frontends.console.routes import _assets
from modelhost.frontends.console.settings import ConsoleSettings
from modelhost.frontends.http.messages import HttpRequest, HttpResponse
from modelhost.frontends.http.routes import HttpRoutes
from modelhost.perf.options import parse_args as parse_perf_args
from modelhost.tune.options import parse_args as parse_tune_args

SETTINGS = ConsoleSettings(
    ports={"http": 8000, "grpc": 8001}, model_control_mode="explicit", memory_budget=2**30
)


def _get(
    routes: HttpRoutes, path: str, method: str = "GET", headers: dict[str, str] | None = None
) -> HttpResponse:
    request = HttpRequest(method, path, "", {"host": "example:8000", **(headers or {})}, b"")
    return asyncio.run(routes(request))


def test_the_page_shows_the_server_and_every_model() -> None:
    answer = _get(HttpRoutes(FakeEngine(), 1 << 20, console=SETTINGS), "/")
    assert answer.status == 200 and answer.content_type.startswith("text/html")
    page = answer.body.decode()
    assert '<td data-key="name">echo</td>' in page and '<td data-key="state">READY</td>' in page
    assert '<td data-key="backend">python</td>' in page
    assert "http 8000, grpc 8001" in page  # the ports
    assert "0 B of 1.0 GiB taken by the loaded models" in page  # the memory budget (no memory_bytes here)
    assert "Evicted lately" in page
    assert "name: &quot;echo&quot;" in page  # config.pbtxt, escaped
    assert html.escape("modelhost perf -m echo -u example:8000") in page
    facts = page.split('id="console-facts">', 1)[1].split("</script>", 1)[0]
    assert orjson.loads(facts)["memory_budget"] == 2**30


def test_a_restricted_category_is_left_out_of_the_page() -> None:
    routes = HttpRoutes(
        FakeEngine(),
        1 << 20,
        {"model-repository": ("admin", "yes"), "metadata": ("meta", "1")},
        console=SETTINGS,
    )
    page = _get(routes, "/").body.decode()
    assert '<td data-key="name">echo</td>' not in page
    assert "model-repository: expecting header &#x27;admin&#x27;" in page
    assert "metadata: expecting header &#x27;meta&#x27;" in page
    health = HttpRoutes(FakeEngine(), 1 << 20, {"health": ("h", "1")}, console=SETTINGS)
    assert '<span id="readiness" class="not-ready">restricted</span>' in _get(health, "/").body.decode()
    allowed = _get(routes, "/", headers={"admin": "yes", "meta": "1"}).body.decode()
    assert '<td data-key="name">echo</td>' in allowed and 'id="restricted"' not in allowed


def test_the_console_category_restricts_page_and_assets() -> None:
    routes = HttpRoutes(FakeEngine(), 1 << 20, {"console": ("k", "v")}, console=SETTINGS)
    for path in ("/", "/console/assets/console.js", "/console/compatibility"):
        answer = _get(routes, path)
        assert answer.status == 403
        assert orjson.loads(answer.body) == {"error": "This API is restricted, expecting header 'k'"}
    assert _get(routes, "/", headers={"k": "v"}).status == 200
    # Without the console its paths are unknown, restricted category or not.
    off = HttpRoutes(FakeEngine(), 1 << 20, {"console": ("k", "v")})
    assert _get(off, "/").status == 404 and _get(off, "/console/assets/console.js").status == 404


@pytest.mark.parametrize(
    ("name", "content_type"),
    [
        ("console.js", "text/javascript"),
        ("console.css", "text/css"),
        ("uPlot.iife.min.js", "text/javascript"),
        ("uPlot.min.css", "text/css"),
        ("uPlot.LICENSE", "text/plain"),
    ],
)
def test_assets_are_served_from_the_package(name: str, content_type: str) -> None:
    answer = _get(HttpRoutes(FakeEngine(), 1 << 20, console=SETTINGS), f"/console/assets/{name}")
    assert answer.status == 200 and answer.content_type.startswith(content_type) and answer.body


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/console/assets/../page.py", 404),
        ("GET", "/console/assets/.hidden.js", 404),
        ("GET", "/console/assets/settings.py", 404),
        ("GET", "/console/assets/", 404),
        ("GET", "/console/nothing", 404),
        ("POST", "/", 404),
        ("PUT", "/console/assets/console.js", 404),
    ],
)
def test_bad_requests_get_clear_answers(method: str, path: str, status: int) -> None:
    routes = HttpRoutes(FakeEngine(), 1 << 20, console=SETTINGS)
    answer = _get(routes, path, method)
    assert answer.status == status and "error" in orjson.loads(answer.body)
    assert _get(routes, "/console/assets/console.js").status == 200  # the console is there: the answer is its


def test_names_the_package_does_not_ship_are_not_remembered() -> None:
    routes = HttpRoutes(FakeEngine(), 1 << 20, console=SETTINGS)
    for i in range(100):
        assert _get(routes, f"/console/assets/nothing{i}.js").status == 404
    assert sorted(_assets()) == [
        "console.css",
        "console.js",
        "uPlot.LICENSE",
        "uPlot.iife.min.js",
        "uPlot.min.css",
    ]


def test_without_the_console_the_paths_are_not_found() -> None:
    routes = HttpRoutes(FakeEngine(), 1 << 20)
    for path in ("/", "/console/assets/console.js"):
        answer = _get(routes, path)
        assert (answer.status, orjson.loads(answer.body)) == (404, {"error": "Not Found"})


def test_the_command_lines_are_ones_perf_and_tune_accept() -> None:
    perf, tune = commands("my_model", "example:8000")
    perf_options = parse_perf_args(shlex.split(perf)[2:])
    assert (perf_options.model, perf_options.url) == ("my_model", "example:8000")
    tune_options = parse_tune_args(shlex.split(tune)[2:])
    assert (tune_options.model, tune_options.url) == ("my_model", "example:8000")
