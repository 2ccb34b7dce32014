"""What the Vertex AI endpoint reads from the environment (Vertex AI sets it in a prediction container), and its
default model, chosen at startup as Triton chooses it."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class VertexAiSettingsError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class VertexAiSettings:
    # Regular expressions a request path must match whole: AIP_PREDICT_ROUTE, AIP_HEALTH_ROUTE.
    predict_route: str
    health_route: str

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> VertexAiSettings:
        env = os.environ if environ is None else environ
        predict, health = env.get("AIP_PREDICT_ROUTE", ""), env.get("AIP_HEALTH_ROUTE", "")
        if not predict:
            raise VertexAiSettingsError("AIP_PREDICT_ROUTE is not defined for Vertex AI endpoint")
        if not health:
            raise VertexAiSettingsError("AIP_HEALTH_ROUTE is not defined for Vertex AI endpoint")
        for variable, route in (("AIP_PREDICT_ROUTE", predict), ("AIP_HEALTH_ROUTE", health)):
            try:
                re.compile(route)
            except re.error as e:
                raise VertexAiSettingsError(
                    f"{variable} is not a valid regular expression: {e} ({route!r})"
                ) from None
        return cls(predict_route=predict, health_route=health)


def default_model(named: str, ready: Sequence[str]) -> str:
    """The model requests without a redirect go to: `named` (--vertex-ai-default-model), which must be loaded,
    or else the repository's one ready model."""
    if not named:
        if len(ready) != 1:
            raise VertexAiSettingsError(
                "Expect the model repository contains only a single model if default model is not specified"
            )
        return ready[0]
    if named not in ready:
        raise VertexAiSettingsError(f"Expect the default model '{named}' is loaded")
    return named


def vertex_ai_defaults(environ: Mapping[str, str]) -> dict[str, object]:
    """The ServerOptions defaults a Vertex AI container's environment changes, as tritonserver changes them:
    AIP_MODE=PREDICTION serves Vertex AI and neither HTTP nor gRPC; AIP_HTTP_PORT is the port. Flags given win."""
    defaults: dict[str, object] = {}
    if environ.get("AIP_MODE", "") == "PREDICTION":
        defaults.update(allow_vertex_ai=True, allow_http=False, allow_grpc=False)
    port = environ.get("AIP_HTTP_PORT", "")
    if port:
        try:
            defaults["vertex_ai_port"] = int(port)
        except ValueError:
            raise VertexAiSettingsError(f"AIP_HTTP_PORT must be an integer, got '{port}'") from None
    return defaults
