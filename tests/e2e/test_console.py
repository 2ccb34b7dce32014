"""The web console (`GET /`) driven in a real headless Chromium (Debian's, installed by scripts/fetch_chromium.sh;
Playwright drives it, no browser download) against a running server, in every --frontend-processes mode.

The models table matches the repository index; the Load and Unload buttons change a model's state through the
repository API; a failed load shows the server's own message; the charts receive data under a short load; the
`config.pbtxt` text is the configuration in force; the page reads as tables without JavaScript; it works behind a
reverse proxy's path prefix; it asks nothing of the server but its API. Screenshots go to test-artifacts/console/
(or $MODELHOST_TEST_ARTIFACTS/console/).
"""

from __future__ import annotations

import http.client
import http.server
import json
import os
import re
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from e2e.models import copy_examples, write_config
from e2e.server_process import RunningServer, running_server

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("MODELHOST_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "console"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

sync_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():
    pytest.skip(
        "no chromium: scripts/test.sh installs Debian's (scripts/fetch_chromium.sh)", allow_module_level=True
    )

# What the page may ask of the server: its own page and assets, and the API (never anything of its own).
ALLOWED = re.compile(
    r"/(|console/assets/[A-Za-z.]+|v2/health/ready|v2/repository/index|v2/models/stats"
    r"|v2/models/[^/]+/versions/[0-9]+/config|v2/repository/models/[^/]+/(load|unload))"
)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("console_repo")
    copy_examples(repo, "simple", "identity_fp32", "simple_string")
    broken = repo / "broken"
    (broken / "1").mkdir(parents=True)
    write_config(broken, 'name: "broken"\nbackend: "no_such_backend"\nmax_batch_size: 1\n')
    return repo


@pytest.fixture(scope="module")
def server(
    repository: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[RunningServer]:
    """One per frontend mode (`frontend_processes` sets the mode running_server starts in)."""
    log = tmp_path_factory.mktemp("console_log") / "server.log"
    with running_server(
        [repository],
        log,
        "--model-control-mode=explicit",
        "--load-model=simple",
        "--load-model=identity_fp32",
        "--model-memory-budget=4GiB",
        "--strict-readiness=false",
    ) as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


class Page:
    """A console page in its own browser context, with every request it made and every script error."""

    def __init__(self, browser: Any, url: str, *, javascript: bool = True) -> None:
        self.context = browser.new_context(
            java_script_enabled=javascript, viewport={"width": 1400, "height": 1000}
        )
        self.page = self.context.new_page()
        self.page.set_default_timeout(30_000)
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(url)
        if javascript:
            self.wait("window.modelhostConsole && window.modelhostConsole.state.refreshes >= 1")

    def wait(self, expression: str) -> None:
        self.page.wait_for_function(expression)

    def evaluate(self, expression: str) -> Any:
        return self.page.evaluate(expression)

    def rows(self) -> dict[tuple[str, str], str]:
        """(model, version) -> state, as the table shows them."""
        cells = self.page.eval_on_selector_all(
            "#models-table tbody tr",
            "rows => rows.map(r => ['name', 'version', 'state'].map("
            "k => r.querySelector(`td[data-key=${k}]`).textContent))",
        )
        return {(name, version): state for name, version, state in cells}

    def screenshot(self, name: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def console(browser: Any, server: RunningServer, frontend_processes: int) -> Iterator[Page]:
    page = Page(browser, f"http://127.0.0.1:{server.http_port}/?refresh=300")
    yield page
    assert page.errors == []
    paths = [re.sub(r"^http://[^/]+", "", url).split("?")[0] for url in page.requests]
    assert [p for p in paths if not ALLOWED.fullmatch(p)] == [], (
        "the page asked for what the API does not answer"
    )
    page.close()


def _index(server: RunningServer) -> list[dict[str, Any]]:
    answer = requests.post(f"http://127.0.0.1:{server.http_port}/v2/repository/index", timeout=30)
    return list(answer.json())


def _wait_state(page: Page, name: str, state: str) -> None:
    page.wait(
        f"[...document.querySelectorAll('#models-table tbody tr[data-model=\"{name}\"]')]"
        f".some(r => r.dataset.state === '{state}')"
    )


def test_the_models_table_matches_the_repository_index(
    console: Page, server: RunningServer, frontend_processes: int
) -> None:
    expected = {(row["name"], row.get("version", "")): row.get("state", "") for row in _index(server)}
    assert console.rows() == expected
    assert expected[("simple", "1")] == "READY"
    # The configuration's facts and the measured memory (a budget is set) are filled in for loaded models.
    backend = console.page.text_content("tr[data-model=simple] td[data-key=backend]")
    memory = console.page.text_content("tr[data-model=simple] td[data-key=memory]")
    assert backend == "onnxruntime" and memory
    names = [name for name, _ in console.rows()]
    assert names == sorted(names)
    console.page.click("th[data-key=name]")  # sorted by name already: the second click turns the order
    assert [name for name, _ in console.rows()] == sorted(names, reverse=True)
    console.page.click("th[data-key=requests]")
    requests_column = console.page.eval_on_selector_all(
        "#models-table tbody td[data-key=requests]", "cells => cells.map(c => Number(c.textContent || 0))"
    )
    assert requests_column == sorted(requests_column)
    console.page.fill("#filter", "identity")
    assert set(console.rows()) == {("identity_fp32", "1")}
    console.screenshot(f"table-fp{frontend_processes}")


def test_load_and_unload_through_the_buttons(
    console: Page, server: RunningServer, frontend_processes: int
) -> None:
    console.page.click("tr[data-model=simple_string] button.load")
    _wait_state(console, "simple_string", "READY")
    assert {(r["name"], r.get("state")) for r in _index(server)} >= {("simple_string", "READY")}
    console.screenshot(f"loaded-fp{frontend_processes}")
    console.page.click("tr[data-model=simple_string] button.unload")
    _wait_state(console, "simple_string", "UNAVAILABLE")
    assert [r.get("state") for r in _index(server) if r["name"] == "simple_string"] == ["UNAVAILABLE"]


def test_a_failed_load_shows_the_servers_message(
    console: Page, server: RunningServer, frontend_processes: int
) -> None:
    console.page.click("tr[data-model=broken] button.load")
    console.wait("document.querySelector('#action-message').className === 'error'")
    shown = console.page.text_content("#action-message")
    answer = requests.post(
        f"http://127.0.0.1:{server.http_port}/v2/repository/models/broken/load", timeout=60
    )
    assert answer.status_code == 400
    assert shown == answer.json()["error"]
    assert "no_such_backend" in shown
    console.screenshot(f"failed-load-fp{frontend_processes}")
    # A reload with an override that is not JSON is caught in the page; one the server refuses shows its words.
    console.page.click("tr[data-model=simple] td[data-key=name]")
    console.page.fill("#config-override", '{"max_batch_size": "many"}')
    console.page.click("#reload-override")
    console.wait("document.querySelector('#action-message').className === 'error'")
    assert "max_batch_size" in (console.page.text_content("#action-message") or "")
    assert [r.get("state") for r in _index(server) if r["name"] == "simple"] == ["READY"]


def test_a_reload_with_a_config_override(console: Page, server: RunningServer) -> None:
    console.page.click("tr[data-model=identity_fp32] td[data-key=name]")
    console.page.fill("#config-override", '{"max_batch_size": 2, "dynamic_batching": {}}')
    console.page.click("#reload-override")
    console.wait("document.querySelector('#action-message').textContent === \"loaded 'identity_fp32'\"")
    config = requests.get(
        f"http://127.0.0.1:{server.http_port}/v2/models/identity_fp32/config", timeout=30
    ).json()
    assert config["max_batch_size"] == 2
    console.wait("document.querySelector('#config-pbtxt').textContent.includes('max_batch_size: 2')")


def test_the_charts_receive_data_under_load(
    console: Page, server: RunningServer, frontend_processes: int
) -> None:
    console.page.click("tr[data-model=simple] td[data-key=name]")
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(data)
        deadline = time.monotonic() + 60
        # Until the page has seen requests in two of its polls (each poll's rate is a difference of two).
        while not console.evaluate(
            "(() => { const h = window.modelhostConsole.state.history.get('simple/1');"
            " return !!h && h.rps.filter(v => v > 0).length >= 2 && h.p99.some(v => v > 0); })()"
        ):
            assert time.monotonic() < deadline, "the charts got no data"
            for _ in range(20):
                client.infer("simple", inputs)
    finally:
        client.close()
    plotted = console.evaluate(
        "(() => { const c = window.modelhostConsole.charts; return {"
        " rps: c.throughput.data[1].filter(v => v > 0).length,"
        " p50: c.latency.data[1].filter(v => v > 0).length,"
        " compute: c.time.data[2].filter(v => v > 0).length,"
        " batches: c.batches.data[1].reduce((a, b) => a + b, 0) }; })()"
    )
    assert plotted["rps"] >= 1 and plotted["p50"] >= 1 and plotted["compute"] >= 1
    assert plotted["batches"] > 0
    console.screenshot(f"charts-fp{frontend_processes}")


def test_config_pbtxt_is_the_configuration_in_force(console: Page, server: RunningServer) -> None:
    for name in ("simple", "identity_fp32"):
        url = f"http://127.0.0.1:{server.http_port}/v2/models/{name}/config"
        served = json_format.ParseDict(requests.get(url, timeout=30).json(), model_config_pb2.ModelConfig())
        text = console.evaluate(
            f"window.modelhostConsole.toPbtxt(window.modelhostConsole.state.configs.get('{name}/1'))"
        )
        shown = text_format.Parse(text, model_config_pb2.ModelConfig())
        assert shown == served, text


def _enum_and_map_fields() -> tuple[set[str], set[str]]:
    enums: set[str] = set()
    maps: set[str] = set()
    seen: set[str] = set()

    def walk(descriptor: Any) -> None:
        if descriptor.full_name in seen:
            return
        seen.add(descriptor.full_name)
        for field in descriptor.fields:
            if field.enum_type is not None:
                enums.add(field.name)
            if field.message_type is None:
                continue
            if field.message_type.GetOptions().map_entry:
                maps.add(field.name)
                value = field.message_type.fields_by_name["value"]
                if value.message_type is not None:
                    walk(value.message_type)
            else:
                walk(field.message_type)

    walk(model_config_pb2.ModelConfig.DESCRIPTOR)
    return enums, maps


def test_the_pbtxt_writer_knows_every_enum_and_map_field(console: Page) -> None:
    enums, maps = _enum_and_map_fields()
    assert set(console.evaluate("[...window.modelhostConsole.ENUM_FIELDS]")) == enums
    assert set(console.evaluate("[...window.modelhostConsole.MAP_FIELDS]")) == maps


def test_without_javascript_the_page_is_a_readable_table(
    browser: Any, server: RunningServer, frontend_processes: int
) -> None:
    page = Page(browser, f"http://127.0.0.1:{server.http_port}/", javascript=False)
    try:
        expected = {(row["name"], row.get("version", "")): row.get("state", "") for row in _index(server)}
        assert page.rows() == expected
        assert page.page.is_hidden("#model-tools")
        assert page.page.locator("th[data-key=actions]").count() == 0
        summary = page.page.locator("details[data-model=simple] summary")
        summary.click()
        text = page.page.text_content("details[data-model=simple] pre") or ""
        assert 'name: "simple"' in text and 'platform: "onnxruntime_onnx"' in text
        assert f"modelhost perf -m simple -u 127.0.0.1:{server.http_port}" in (
            page.page.text_content("details[data-model=simple]") or ""
        )
        page.screenshot(f"no-javascript-fp{frontend_processes}")
    finally:
        page.close()


class _PrefixProxy(http.server.ThreadingHTTPServer):
    """A reverse proxy that serves the server under /modelhost/ (as `location /modelhost/ { proxy_pass ...; }`)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.seen: list[str] = []
        super().__init__(("127.0.0.1", 0), _ProxyHandler)


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    server: _PrefixProxy

    def _forward(self) -> None:
        self.server.seen.append(self.path)
        if not self.path.startswith("/modelhost/"):
            self.send_error(404)
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "accept")}
        request = urllib.request.Request(
            self.server.upstream + self.path.removeprefix("/modelhost"), body, headers, method=self.command
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                status, payload, kind = answer.status, answer.read(), answer.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            status, payload, kind = e.code, e.read(), e.headers.get("Content-Type", "")
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _forward

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_behind_a_path_prefix(browser: Any, server: RunningServer, frontend_processes: int) -> None:
    proxy = _PrefixProxy(f"http://127.0.0.1:{server.http_port}")
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        page = Page(browser, f"http://127.0.0.1:{proxy.server_port}/modelhost/?refresh=300")
        try:
            page.wait("window.modelhostConsole.state.refreshes >= 2")
            assert page.evaluate("window.modelhostConsole.state.lastError") == ""
            assert page.rows()[("simple", "1")] == "READY"
            page.page.click("tr[data-model=simple_string] button.load")
            _wait_state(page, "simple_string", "READY")
            page.page.click("tr[data-model=simple_string] button.unload")
            _wait_state(page, "simple_string", "UNAVAILABLE")
            assert page.errors == []
            page.screenshot(f"path-prefix-fp{frontend_processes}")
        finally:
            page.close()
        assert proxy.seen and all(path.startswith("/modelhost/") for path in proxy.seen), proxy.seen
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_the_compatibility_page_and_the_assets(server: RunningServer) -> None:
    base = f"http://127.0.0.1:{server.http_port}"
    page = requests.get(f"{base}/console/compatibility", timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<h1>Compatibility with Triton Inference Server</h1>" in page.text and "<table>" in page.text
    script = requests.get(f"{base}/console/assets/console.js", timeout=30)
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    licence = requests.get(f"{base}/console/assets/uPlot.LICENSE", timeout=30)
    assert licence.status_code == 200 and "MIT" in licence.text


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/console/assets/nothing.js", 404),
        ("GET", "/console/assets/..%2Fpage.py", 404),
        ("GET", "/console/assets/../page.py", 404),
        ("GET", "/console/", 404),
        ("POST", "/", 404),
        ("DELETE", "/console/assets/console.js", 404),
    ],
)
def test_bad_console_requests(server: RunningServer, method: str, path: str, status: int) -> None:
    # http.client sends the path as it is (requests would resolve the "../" before sending it).
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    try:
        connection.request(method, path)
        answer = connection.getresponse()
        assert answer.status == status
        assert "error" in json.loads(answer.read())
    finally:
        connection.close()
    # The console is there: the answer above is its own.
    assert requests.get(f"http://127.0.0.1:{server.http_port}/console/assets/console.js", timeout=30).ok
    assert requests.get(f"http://127.0.0.1:{server.http_port}/v2/health/ready", timeout=30).status_code == 200


def test_restricted_and_switched_off(repository: Path, tmp_path: Path, browser: Any) -> None:
    with running_server(
        [repository],
        tmp_path / "restricted.log",
        "--model-control-mode=explicit",
        "--load-model=simple",
        "--http-restricted-api=console:console-key=open",
        "--http-restricted-api=model-repository:admin-key=yes",
    ) as restricted:
        base = f"http://127.0.0.1:{restricted.http_port}"
        refused = requests.get(f"{base}/", timeout=30)
        assert refused.status_code == 403
        assert refused.json() == {"error": "This API is restricted, expecting header 'console-key'"}
        assert requests.get(f"{base}/console/assets/console.js", timeout=30).status_code == 403
        allowed = requests.get(f"{base}/", headers={"console-key": "open"}, timeout=30)
        assert allowed.status_code == 200
        # Nor does the page itself show what the API would refuse that request: the index is left out.
        assert "model-repository: expecting header &#x27;admin-key&#x27;" in allowed.text
        assert 'data-key="name">simple<' not in allowed.text
        opened = requests.get(f"{base}/", headers={"console-key": "open", "admin-key": "yes"}, timeout=30)
        assert 'data-key="name">simple<' in opened.text and 'id="restricted"' not in opened.text
        # The page's own calls are restricted like any client's: the browser sends the console's header (as a
        # proxy in front would), not the repository's, so a load shows the server's refusal.
        context = browser.new_context(extra_http_headers={"console-key": "open"})
        try:
            page = context.new_page()
            page.goto(f"{base}/?refresh=300")
            page.wait_for_function("window.modelhostConsole && window.modelhostConsole.state.refreshes >= 1")
            assert "This API is restricted, expecting header 'admin-key'" in page.evaluate(
                "window.modelhostConsole.state.lastError"
            )
        finally:
            context.close()
    with running_server(
        [repository], tmp_path / "off.log", "--model-control-mode=explicit", "--http-console=false"
    ) as off:
        base = f"http://127.0.0.1:{off.http_port}"
        for path in ("/", "/console/assets/console.js", "/console/compatibility"):
            answer = requests.get(f"{base}{path}", timeout=30)
            assert (answer.status_code, answer.json()) == (404, {"error": "Not Found"})
