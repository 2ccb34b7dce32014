"""TLS on the gRPC port (tritonserver's flags) and the HTTP port (ours), mutual TLS included, through tritonclient's
own SSL options, against certificates made here; certificates reloaded on SIGHUP without dropping connections."""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from e2e.certificates import CertificateAuthority, Pem
from e2e.server_process import RunningServer, running_server


@dataclass(frozen=True)
class Pki:
    ca: Pem
    server: Pem
    client: Pem
    other_ca: Pem  # signs `other_server`, which the server is given on reload
    other_server: Pem
    stranger: Pem  # a client certificate no CA of the server's signed


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca, other = CertificateAuthority(folder, "ca"), CertificateAuthority(folder, "other-ca")
    unknown = CertificateAuthority(folder / "unknown", "unknown-ca")
    return Pki(
        ca.pem,
        ca.issue("server"),
        ca.issue("client", client=True),
        other.pem,
        other.issue("other-server"),
        unknown.issue("stranger", client=True),
    )


def client_context(pki: Pki, ca: Pem | None = None, client: Pem | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str((ca or pki.ca).cert))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    return context


def tls_flags(served: Pem, pki: Pki) -> list[str]:
    return [
        "--grpc-use-ssl-mutual=true",
        f"--grpc-server-cert={served.cert}",
        f"--grpc-server-key={served.key}",
        f"--grpc-root-cert={pki.ca.cert}",
        "--http-use-ssl-mutual=true",
        f"--http-server-cert={served.cert}",
        f"--http-server-key={served.key}",
        f"--http-root-cert={pki.ca.cert}",
    ]


@pytest.fixture(scope="module")
def server(
    main_repository: Path, tmp_path_factory: pytest.TempPathFactory, pki: Pki, frontend_processes: int
) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("tls") / "server.log"
    health = client_context(pki, client=pki.client)
    with running_server([main_repository], log, *tls_flags(pki.server, pki), health_tls=health) as running:
        yield running
    assert "Traceback" not in log.read_text()


def simple_inputs(module: type[grpcclient.InferInput] | type[httpclient.InferInput]) -> list[object]:
    inputs = [module("INPUT0", [1, 16], "INT32"), module("INPUT1", [1, 16], "INT32")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
    return inputs


def grpc_client(
    server: RunningServer, pki: Pki, ca: Pem | None = None, client: Pem | None = None
) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(
        server.grpc_url,
        ssl=True,
        root_certificates=str((ca or pki.ca).cert),
        private_key=str(client.key) if client else None,
        certificate_chain=str(client.cert) if client else None,
    )


def test_grpc_over_mutual_tls(server: RunningServer, pki: Pki) -> None:
    client = grpc_client(server, pki, client=pki.client)
    try:
        out = client.infer("simple", simple_inputs(grpcclient.InferInput)).as_numpy("OUTPUT0")
        np.testing.assert_array_equal(out, 2 * np.arange(16, dtype=np.int32).reshape(1, 16))
        assert client.is_server_ready()
    finally:
        client.close()


@pytest.mark.parametrize("who", ["no certificate", "a stranger's certificate", "cleartext"])
def test_grpc_clients_without_a_trusted_certificate_are_refused(
    server: RunningServer, pki: Pki, who: str
) -> None:
    if who == "cleartext":
        client = grpcclient.InferenceServerClient(server.grpc_url)
    else:
        stranger = pki.stranger if who == "a stranger's certificate" else None
        client = grpcclient.InferenceServerClient(
            server.grpc_url,
            ssl=True,
            root_certificates=str(pki.ca.cert),
            private_key=str(stranger.key) if stranger else None,
            certificate_chain=str(stranger.cert) if stranger else None,
        )
    try:
        with pytest.raises(InferenceServerException) as refused:
            client.is_server_live(client_timeout=10)
        assert refused.value.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")
    finally:
        client.close()


def test_https_with_a_client_certificate(server: RunningServer, pki: Pki) -> None:
    client = httpclient.InferenceServerClient(
        server.http_url,
        ssl=True,
        ssl_options={
            "ca_certs": str(pki.ca.cert),
            "certfile": str(pki.client.cert),
            "keyfile": str(pki.client.key),
        },
    )
    try:
        out = client.infer("simple", simple_inputs(httpclient.InferInput)).as_numpy("OUTPUT0")  # type: ignore[arg-type]
        np.testing.assert_array_equal(out, 2 * np.arange(16, dtype=np.int32).reshape(1, 16))
    finally:
        client.close()


def test_https_without_a_client_certificate_or_in_cleartext_is_refused(
    server: RunningServer, pki: Pki
) -> None:
    connection = http.client.HTTPSConnection(
        "localhost", server.http_port, context=client_context(pki), timeout=10
    )
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        connection.request("GET", "/v2/health/live")
        connection.getresponse().read()
    connection.close()
    plain = http.client.HTTPConnection("localhost", server.http_port, timeout=10)
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        plain.request("GET", "/v2/health/live")
        plain.getresponse().read()
    plain.close()
    assert "Traceback" not in server.log()


def test_certificates_are_reloaded_on_sighup_without_dropping_connections(
    main_repository: Path, tmp_path: Path, pki: Pki, frontend_processes: int
) -> None:
    served = Pem(tmp_path / "served.crt", tmp_path / "served.key")
    shutil.copy(pki.server.cert, served.cert)
    shutil.copy(pki.server.key, served.key)
    health = client_context(pki, client=pki.client)
    with running_server(
        [main_repository], tmp_path / "server.log", *tls_flags(served, pki), health_tls=health
    ) as srv:
        before = http.client.HTTPSConnection("localhost", srv.http_port, context=health, timeout=10)
        before.request("GET", "/v2/health/ready")
        assert before.getresponse().read() == b""  # 200, keep-alive
        # The new certificate, from another CA, replaces the files; SIGHUP tells the server.
        shutil.copy(pki.other_server.cert, served.cert)
        shutil.copy(pki.other_server.key, served.key)
        os.kill(srv.process.pid, signal.SIGHUP)
        new_ca = client_context(pki, ca=pki.other_ca, client=pki.client)
        deadline = time.monotonic() + 30
        while True:  # until every process has reloaded (frontends get the signal from the engine)
            try:
                connection = http.client.HTTPSConnection(
                    "localhost", srv.http_port, context=new_ca, timeout=10
                )
                connection.request("GET", "/v2/health/ready")
                assert connection.getresponse().status == 200
                connection.close()
                if srv.log().count("reloaded the HTTP port's TLS certificate") >= max(1, frontend_processes):
                    break
            except ssl.SSLError:
                pass
            assert time.monotonic() < deadline, srv.log()[-3000:]
            time.sleep(0.2)
        # The connection opened before goes on with the certificate it was given.
        before.request("GET", "/v2/health/ready")
        assert before.getresponse().status == 200
        before.close()
        # gRPC's new connections get the new certificate too.
        client = grpc_client(srv, pki, ca=pki.other_ca, client=pki.client)
        try:
            assert client.is_server_live()
        finally:
            client.close()
        assert srv.process.poll() is None  # SIGHUP did not stop it
        assert "reloaded the GRPC port's TLS certificate" in srv.log()


def test_a_missing_certificate_stops_the_server_before_any_model_loads(
    main_repository: Path, tmp_path: Path, frontend_processes: int
) -> None:
    log = tmp_path / "server.log"
    with (
        pytest.raises(RuntimeError, match="server exited with 1"),
        running_server(
            [main_repository],
            log,
            "--grpc-use-ssl=true",
            f"--grpc-server-cert={tmp_path / 'missing.crt'}",
            f"--grpc-server-key={tmp_path / 'missing.key'}",
        ),
    ):
        pass
    assert f"cannot use --grpc-server-cert={tmp_path / 'missing.crt'}" in log.read_text()
    assert "No such file or directory" in log.read_text()
    assert "loading:" not in log.read_text()  # the repository has models; none was loaded
