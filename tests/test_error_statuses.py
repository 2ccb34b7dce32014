"""Each kind of error (errors.py) has its status on every protocol, in one table per frontend."""

from __future__ import annotations

import grpc
import pytest

from modelhost import errors
from modelhost.errors import ErrorKind
from modelhost.frontends.grpc.statuses import GRPC_CODE, grpc_code
from modelhost.frontends.http.statuses import HTTP_STATUS, http_status


def test_every_kind_has_an_http_status_and_a_grpc_code() -> None:
    assert set(HTTP_STATUS) == set(ErrorKind) == set(GRPC_CODE)


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (errors.InvalidArgument("x"), 400, grpc.StatusCode.INVALID_ARGUMENT),
        (errors.ModelConfigError("x"), 400, grpc.StatusCode.INVALID_ARGUMENT),
        (errors.NotFound("x"), 404, grpc.StatusCode.NOT_FOUND),
        (errors.Rejected("x"), 503, grpc.StatusCode.UNAVAILABLE),
        (errors.DecoupledModel(), 501, grpc.StatusCode.UNIMPLEMENTED),
        (errors.AlreadyExists("x"), 400, grpc.StatusCode.ALREADY_EXISTS),
        (errors.Cancelled("x"), 400, grpc.StatusCode.CANCELLED),
        (errors.OutOfMemory("x"), 507, grpc.StatusCode.RESOURCE_EXHAUSTED),
        (errors.UnsupportedMediaType("x"), 415, grpc.StatusCode.INVALID_ARGUMENT),
        (errors.InternalError("x"), 500, grpc.StatusCode.INTERNAL),
        (errors.UnknownError("x"), 400, grpc.StatusCode.UNKNOWN),
    ],
)
def test_statuses_of_the_errors(error: errors.ModelhostError, status: int, code: grpc.StatusCode) -> None:
    assert (http_status(error), grpc_code(error)) == (status, code)


def test_the_core_imports_no_wire() -> None:
    source = errors.__file__
    assert source is not None
    with open(source, encoding="utf-8") as f:
        assert "import grpc" not in f.read()
