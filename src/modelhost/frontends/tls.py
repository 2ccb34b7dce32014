"""TLS for the gRPC port (tritonserver's `--grpc-use-ssl`, `--grpc-use-ssl-mutual`, `--grpc-server-cert`,
`--grpc-server-key`, `--grpc-root-cert`) and for the HTTP and SageMaker ports (`--http-use-ssl` and the rest, our
own flags of the same shape: tritonserver has no HTTPS).

A port's context is made once, when the server starts, and its certificate reloaded into the same context on
SIGHUP: connections already open keep theirs, new ones get the new one, and none is dropped.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass

from modelhost.options import ServerOptions

log = logging.getLogger("modelhost.server")


@dataclass(frozen=True)
class TlsFiles:
    """A port's PEM files: its certificate (chain) and key, and with `mutual` the CA(s) that sign the clients'."""

    port: str  # what the log calls the port ("HTTP", "GRPC")
    cert: str
    key: str
    root: str
    mutual: bool


def port_tls(options: ServerOptions, port: str) -> TlsFiles | None:
    """The TLS files the flags give `port` ("http": the HTTP and SageMaker ports; "grpc"), None for cleartext."""
    use, mutual, cert, key, root = (
        getattr(options, f"{port}_{name}")
        for name in ("use_ssl", "use_ssl_mutual", "server_cert", "server_key", "root_cert")
    )
    if not (use or mutual):
        return None
    return TlsFiles(port.upper(), cert, key, root, mutual)


def http_tls(options: ServerOptions) -> TlsFiles | None:
    return port_tls(options, "http")


def grpc_tls(options: ServerOptions) -> TlsFiles | None:
    return port_tls(options, "grpc")


class TlsError(Exception):
    """A certificate, key or CA file that cannot be used (its message names the flag and the file)."""


def server_context(files: TlsFiles, alpn: list[str] | None = None) -> ssl.SSLContext:
    """A server context for `files`; `alpn`: the protocols offered (gRPC: h2, which its clients insist on)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if alpn:
        context.set_alpn_protocols(alpn)
    _load(context, files)
    if files.mutual:
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def reload(context: ssl.SSLContext, files: TlsFiles) -> bool:
    """Load the files again into `context` (SIGHUP); on failure the context keeps what it had. True if loaded."""
    try:
        _load(context, files)
    except TlsError as e:
        log.error("kept the %s port's TLS certificate: %s", files.port, e)
        return False
    log.info("reloaded the %s port's TLS certificate from %s", files.port, files.cert)
    return True


class TlsPorts:
    """The contexts of a process's TLS ports (None where a port is cleartext), made from their files at once, so
    that a wrong file stops the server before it loads any model."""

    def __init__(self, http: TlsFiles | None, grpc: TlsFiles | None) -> None:
        self.http = server_context(http) if http is not None else None
        self.grpc = server_context(grpc, ["h2"]) if grpc is not None else None
        self._ports = [
            (context, files)
            for context, files in ((self.http, http), (self.grpc, grpc))
            if context is not None and files is not None
        ]

    def __bool__(self) -> bool:
        return bool(self._ports)

    def reload(self) -> None:
        """SIGHUP: every port's certificate again, from its files."""
        for context, files in self._ports:
            reload(context, files)


def _load(context: ssl.SSLContext, files: TlsFiles) -> None:
    flag = f"--{files.port.lower()}"
    try:
        context.load_cert_chain(files.cert, files.key)
    except (OSError, ssl.SSLError) as e:
        raise TlsError(
            f"cannot use {flag}-server-cert={files.cert} with {flag}-server-key={files.key}: {_reason(e)}"
        ) from e
    if files.root:
        try:
            context.load_verify_locations(cafile=files.root)
        except (OSError, ssl.SSLError) as e:
            raise TlsError(f"cannot use {flag}-root-cert={files.root}: {_reason(e)}") from e


def _reason(e: Exception) -> str:
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


__all__ = ["TlsError", "TlsFiles", "TlsPorts", "grpc_tls", "http_tls", "port_tls", "reload", "server_context"]
