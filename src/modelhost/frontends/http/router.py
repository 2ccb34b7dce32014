"""Routes as data, as Starlette has them (`Route(path, endpoint, methods)`): a table of routes, each its methods, its
path pattern, its endpoint and its restricted-API category, compiled once into a matcher that finds a request's
route with one dict lookup (paths without parameters) or one anchored regex (a few, dispatched by their literal
prefix). The patterns that differ only in their literal ends share one regex; the table's order is the order they
are tried in, so the most frequent route goes first.

A pattern is a path with parameters and optional parts, the grammar of Triton's routing expressions
(http_server.cc) written out: `/v2/models/{model}[/versions/{version:int}]/infer`.
- `{name}`: one non-empty path segment (`[^/]+`), URL-unquoted, as Triton unquotes model and region names;
- `{name:int}`: digits, as they are (Triton parses a version with std::stol: the caller checks its range);
- `{name:path}`: the rest of the path, slashes included, as it is;
- `{name:a|b}`: one of these words;
- `[...]`: an optional part (a parameter inside it that is absent is "").

Several routes may share a pattern, each with its own methods: a path that matches a pattern whose routes do not
serve the request's method is a partial match (the caller answers 405), as in Starlette's router.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Generic, TypeVar
from urllib.parse import unquote

E = TypeVar("E")

# The method that stands for every method in a route's methods: its endpoint answers those it does not serve.
ANY = "*"

_PART = re.compile(r"\{(\w+)(?::([^}]*))?\}|\[|\]")
_CONVERTERS = {None: "[^/]+", "int": "[0-9]+", "path": ".*"}
# The parameters of every path that matches no parameter: shared, never changed.
_NO_PARAMS: dict[str, str] = {}


class Route(Generic[E]):
    """One row of a table: the `methods` (or (ANY,)) `endpoint` serves at the paths `pattern` matches, and the
    restricted-API category of those paths (every route of a pattern has the same: it is known before the
    method is looked at)."""

    __slots__ = ("category", "endpoint", "methods", "pattern")

    def __init__(self, methods: tuple[str, ...], pattern: str, endpoint: E, category: str) -> None:
        self.methods = methods
        self.pattern = pattern
        self.endpoint = endpoint
        self.category = category

    def __repr__(self) -> str:
        return f"Route({self.methods!r}, {self.pattern!r}, {self.category!r})"


class Resource(Generic[E]):
    """The routes of one pattern: the endpoint of each method, and their category."""

    __slots__ = ("category", "endpoints", "pattern")

    def __init__(self, pattern: str, category: str) -> None:
        self.pattern = pattern
        self.category = category
        self.endpoints: dict[str, E] = {}


# A request's match: the resource its path names, the endpoint that serves its method there (None: a partial
# match, 405), and the path's parameters by name (those of a path without parameters are shared: never to be
# changed).
RouteMatch = tuple[Resource[E], E | None, dict[str, str]]


class _Family(Generic[E]):
    """The patterns that differ only in their literal tail (`.../infer`, `.../ready`): one regex for them all, each
    tail a group of its own at the end, so that the last group that matched (`lastindex`) picks the resource."""

    __slots__ = ("by_group", "head", "prefixes", "regex", "tails", "unquoted")

    def __init__(self, prefixes: tuple[str, ...], head: str, unquoted: tuple[str, ...]) -> None:
        self.prefixes = prefixes
        self.head = head
        self.unquoted = unquoted
        self.tails: dict[str, Resource[E]] = {}
        self.regex = re.compile("")
        self.by_group: list[Resource[E] | None] = []

    def compile(self) -> None:
        # In the table's order, the empty tail last (which would match first, then fail at the end): the routes
        # that come first in the table are the quickest to match.
        tails = sorted(self.tails, key=lambda tail: not tail)
        self.regex = re.compile(f"{self.head}(?:{'|'.join(f'({re.escape(t)})' for t in tails)})")
        first = self.regex.groups - len(tails) + 1
        self.by_group = [None] * first + [self.tails[t] for t in tails]


def _split(pattern: str) -> tuple[tuple[str, ...], str, str, tuple[str, ...]]:
    """A pattern's literal prefixes (every path it matches starts with one of them), its head as a regex, its
    literal tail, and its parameters to unquote."""
    regex: list[str] = []
    unquoted: list[str] = []
    prefixes: tuple[str, ...] = ()
    position = 0
    head_end = 0
    for part in _PART.finditer(pattern):
        literal = pattern[position : part.start()]
        name, converter = part.group(1), part.group(2)
        words = converter.split("|") if converter is not None and "|" in converter else []
        if not prefixes:
            prefixes = tuple(literal + word for word in words) or (literal,)
        regex.append(re.escape(literal))
        if part.group() == "[":
            regex.append("(?:")
        elif part.group() == "]":
            regex.append(")?")
        elif words:
            regex.append(f"(?P<{name}>{'|'.join(re.escape(word) for word in words)})")
        elif converter in _CONVERTERS:
            regex.append(f"(?P<{name}>{_CONVERTERS[converter]})")
            if converter is None:
                unquoted.append(name)
        else:
            raise ValueError(f"unknown converter '{converter}' in route pattern '{pattern}'")
        position = head_end = part.end()
    if not prefixes:
        return (pattern,), "", pattern, ()
    return prefixes, "".join(regex), pattern[head_end:], tuple(unquoted)


class Router(Generic[E]):
    """A table of routes, compiled to match paths."""

    __slots__ = ("families", "resources", "static")

    def __init__(self, routes: Iterable[Route[E]]) -> None:
        self.resources: dict[str, Resource[E]] = {}
        self.static: dict[str, Resource[E]] = {}
        self.families: list[_Family[E]] = []
        families: dict[str, _Family[E]] = {}
        for route in routes:
            resource = self.resources.get(route.pattern)
            if resource is None:
                resource = self.resources[route.pattern] = Resource(route.pattern, route.category)
                prefixes, head, tail, unquoted = _split(route.pattern)
                if not head:
                    self.static[route.pattern] = resource
                else:
                    family = families.get(head)
                    if family is None:
                        family = families[head] = _Family(prefixes, head, unquoted)
                        self.families.append(family)
                    family.tails[tail] = resource
            if resource.category != route.category:
                raise ValueError(f"the routes of '{route.pattern}' are of different categories")
            for method in route.methods:
                if method in resource.endpoints:
                    raise ValueError(f"two routes for {method} '{route.pattern}'")
                resource.endpoints[method] = route.endpoint
        for family in self.families:
            family.compile()

    def match(self, method: str, path: str) -> RouteMatch[E] | None:
        """What serves `method` at `path`; None: no route has this path. A path without parameters wins over a
        pattern (`/v2/models/stats` is not a model called "stats"); patterns are tried in the order of the table."""
        params = _NO_PARAMS
        resource = self.static.get(path)
        if resource is None:
            for family in self.families:
                if path.startswith(family.prefixes):
                    m = family.regex.fullmatch(path)
                    if m is not None:
                        resource = family.by_group[m.lastindex or 0]
                        params = m.groupdict("")
                        if "%" in path:
                            for name in family.unquoted:
                                params[name] = unquote(params[name])
                        break
            if resource is None:
                return None
        endpoints = resource.endpoints
        endpoint = endpoints.get(method)
        if endpoint is None:
            endpoint = endpoints.get(ANY)
        return resource, endpoint, params


__all__ = ["ANY", "Resource", "Route", "RouteMatch", "Router"]
