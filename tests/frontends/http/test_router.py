"""The route table's matcher: patterns, parameters, precedence, partial matches, and the tables it refuses."""

from __future__ import annotations

import pytest

from modelhost.frontends.http.router import ANY, Route, Router

ROUTER = Router(
    [
        Route(("GET",), "/v2", "server", "metadata"),
        Route(("GET",), "/v2/models/{model}[/versions/{version:int}]", "model", "metadata"),
        Route(("POST",), "/v2/models/{model}[/versions/{version:int}]/infer", "infer", "inference"),
        Route(("POST",), "/v2/models/{model}[/versions/{version:int}]/infer_more", "more", "inference"),
        Route(("GET",), "/v2/models/stats", "all stats", "statistics"),
        Route(("GET",), "/v2/{kind:system|cuda}memory/status", "status", "memory"),
        Route(("GET",), "/files/{path:path}", "file", "files"),
        Route(("GET",), "/things", "list", "things"),
        Route(("POST",), "/things", "add", "things"),
        Route((ANY,), "/any", "any", "other"),
        Route(("GET",), "/any", "get any", "other"),
    ]
)


def _match(path: str) -> tuple[str, dict[str, str]] | None:
    matched = ROUTER.match("GET", path)
    if matched is None:
        return None
    resource, _, params = matched
    return resource.pattern, params


def test_paths_without_parameters_are_one_lookup_and_win_over_patterns() -> None:
    assert _match("/v2") == ("/v2", {})
    assert _match("/v2/models/stats") == ("/v2/models/stats", {})  # not a model called "stats"
    assert _match("/v2/models/stats/infer") == (
        "/v2/models/{model}[/versions/{version:int}]/infer",
        {"model": "stats", "version": ""},
    )


def test_parameters_optional_parts_and_converters() -> None:
    model = "/v2/models/{model}[/versions/{version:int}]"
    assert _match("/v2/models/m") == (model, {"model": "m", "version": ""})
    assert _match("/v2/models/m/versions/12/infer") == (model + "/infer", {"model": "m", "version": "12"})
    assert _match("/v2/models/m/infer_more") == (model + "/infer_more", {"model": "m", "version": ""})
    assert _match("/v2/models/a%20b%2Fc") == (model, {"model": "a b/c", "version": ""})  # unquoted
    assert _match("/v2/cudamemory/status") == ("/v2/{kind:system|cuda}memory/status", {"kind": "cuda"})
    assert _match("/files/a/b%20c") == ("/files/{path:path}", {"path": "a/b%20c"})  # as it is
    assert _match("/files/") == ("/files/{path:path}", {"path": ""})


@pytest.mark.parametrize(
    "path",
    [
        "",
        "/",
        "/v2/",
        "/v2/models",
        "/v2/models/",
        "/v2/models//infer",
        "/v2/models/m/",
        "/v2/models/m/versions",
        "/v2/models/m/versions/x",
        "/v2/models/m/versions/-1",
        "/v2/models/m/versions/1/",
        "/v2/models/m/infer/",
        "/v2/models/m/other",
        "/v2/memory/status",
        "/v2/gpumemory/status",
        "/files",
        "/thing",
    ],
)
def test_a_path_no_pattern_matches_whole_has_no_match(path: str) -> None:
    assert ROUTER.match("GET", path) is None


def _endpoint(method: str, path: str) -> str | None:
    matched = ROUTER.match(method, path)
    assert matched is not None
    return matched[1]


def test_the_methods_of_a_path_and_partial_matches() -> None:
    matched = ROUTER.match("GET", "/things")
    assert matched is not None and matched[0].category == "things"
    assert (_endpoint("GET", "/things"), _endpoint("POST", "/things")) == ("list", "add")
    assert _endpoint("DELETE", "/things") is None  # the path, not the method: 405
    assert _endpoint("POST", "/v2/models/m") is None
    assert (_endpoint("GET", "/any"), _endpoint("PATCH", "/any")) == ("get any", "any")


def test_a_path_without_parameters_has_the_shared_empty_parameters() -> None:
    first, second = ROUTER.match("GET", "/v2"), ROUTER.match("POST", "/v2")
    assert first is not None and second is not None
    assert first[2] is second[2] and first[2] == {}
    assert (first[1], second[1]) == ("server", None)


def test_tables_it_refuses() -> None:
    with pytest.raises(ValueError, match="two routes for GET '/a'"):
        Router([Route(("GET",), "/a", 1, "x"), Route(("GET", "POST"), "/a", 2, "x")])
    with pytest.raises(ValueError, match="different categories"):
        Router([Route(("GET",), "/a", 1, "x"), Route(("POST",), "/a", 2, "y")])
    with pytest.raises(ValueError, match="unknown converter 'float'"):
        Router([Route(("GET",), "/a/{n:float}", 1, "x")])
