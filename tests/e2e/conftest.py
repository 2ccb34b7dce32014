from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from e2e import server_process
from e2e.clients import Api
from e2e.models import add_identity, add_nobatch, add_reshape, add_versioned_add, copy_examples
from e2e.server_process import FRONTEND_MODES, RunningServer, running_server


@pytest.fixture(scope="module", autouse=True, params=FRONTEND_MODES, ids=[f"fp{n}" for n in FRONTEND_MODES])
def frontend_processes(request: pytest.FixtureRequest) -> Iterator[int]:
    """Every end-to-end module runs against the single-process server and against two frontend processes."""
    server_process.frontend_processes = request.param
    yield request.param
    server_process.frontend_processes = 0


@pytest.fixture(autouse=True)
def collect_clients_here() -> Iterator[None]:
    """After each test, the garbage it left is collected on the main thread. A tritonclient HTTP client a test did
    not close is otherwise closed by a cyclic collection on whichever thread happens to run it, where its gevent
    pool cannot be joined: an unraisable error that fails whatever test runs then."""
    yield
    gc.collect()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A module marked `engine_served` tests what the engine does alike in every --frontend-processes mode: its run
    in another mode than 0 would repeat mode 0's, so only mode 0's is kept."""
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        mode = callspec.params.get("frontend_processes", 0) if callspec is not None else 0
        (dropped if mode != 0 and item.get_closest_marker("engine_served") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def build_main_repository(repo: Path) -> None:
    """The repository most end-to-end modules share: examples plus one model per feature under test."""
    copy_examples(repo, "simple", "simple_string", "identity_fp32", "mlp")
    for datatype in (
        "BOOL",
        "UINT8",
        "INT8",
        "INT16",
        "UINT16",
        "UINT32",
        "INT64",
        "UINT64",
        "FP16",
        "FP64",
        "BYTES",
    ):
        add_identity(repo, f"identity_{datatype.lower()}", datatype)
    add_identity(repo, "classify_fp32", "FP32", dims="[ 4 ]", label_file="labels.txt")
    (repo / "classify_fp32" / "labels.txt").write_text("cat\ndog\nbird\nfish\n")
    add_reshape(repo)
    add_nobatch(repo)
    add_versioned_add(repo, "versions_latest", (1, 2, 3), "{ latest { num_versions: 2 } }")
    add_versioned_add(repo, "versions_all", (1, 2, 3), "{ all {} }")
    add_versioned_add(repo, "versions_specific", (1, 2, 3), "{ specific { versions: [ 1, 3 ] } }")


@pytest.fixture(scope="session")
def main_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("repo")
    build_main_repository(repo)
    return repo


@pytest.fixture(scope="module")
def server(
    main_repository: Path, tmp_path_factory: pytest.TempPathFactory, frontend_processes: int
) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("log") / "server.log"
    with running_server([main_repository], log) as running:
        yield running


# Clients of the module's `server` (the one above, or the module's own), for tests over both protocols.


@pytest.fixture(scope="module")
def http(server: RunningServer) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    yield client
    client.close()


@pytest.fixture(scope="module")
def grpc_client(server: RunningServer) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    yield client
    client.close()


@pytest.fixture(params=["http", "grpc"])
def api(
    request: pytest.FixtureRequest,
    http: httpclient.InferenceServerClient,
    grpc_client: grpcclient.InferenceServerClient,
) -> Api:
    if request.param == "http":
        return Api("http", httpclient, http)
    return Api("grpc", grpcclient, grpc_client)
