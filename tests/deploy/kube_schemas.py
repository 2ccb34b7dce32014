"""Validate Kubernetes manifests offline, as strictly as an API server with field validation Strict would.

Built-in kinds go through kubernetes-validate's Kubernetes 1.30 strict schemas (unknown fields rejected); a kind or
apiVersion that 1.30 does not serve (autoscaling/v2beta2, for one) has no schema there and fails. Custom resources
(KEDA, prometheus-operator, KServe) go through the openAPIV3Schema of their published CRDs, kept in
deploy/schemas/crds/ (see its README), made strict the way the API server's pruning is: an object field that its
schema does not declare is an error unless the schema preserves unknown fields or declares additionalProperties.
A kind that is neither fails.

What no schema here can check: the CRDs' CEL rules (x-kubernetes-validations) and formats, which the API server
also enforces.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import referencing
import yaml

KUBERNETES_VERSION = "1.30.0"
CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "schemas" / "crds"

_STRICT_SCHEMAS = f"kubernetes-json-schema/v{KUBERNETES_VERSION}-local-strict"
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def load_documents(text: str) -> list[dict[str, Any]]:
    """The YAML documents of a multi-document text, empty ones (a lone `---`, comments only) dropped."""
    return [doc for doc in yaml.safe_load_all(text) if doc]


def validate_manifest(doc: dict[str, Any]) -> None:
    """Raise AssertionError naming the document and every problem found, unless it is a valid object."""
    if not isinstance(doc, dict):
        raise AssertionError(f"a manifest is a mapping, not {type(doc).__name__}: {doc!r:.200}")
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise AssertionError(f"a manifest names its apiVersion and kind as strings: {doc!r:.200}")
    validator = _crd_validator(api_version, kind)
    problems = _builtin_problems(doc) if validator is None else _schema_problems(validator, doc)
    if problems:
        listed = "\n".join(f"  - {problem}" for problem in problems)
        raise AssertionError(f"{_name(doc)} is not valid:\n{listed}")


def _name(doc: dict[str, Any]) -> str:
    metadata = doc.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return f"{doc['apiVersion']} {doc['kind']}/{name or '<no name>'}"


def _schema_problems(validator: jsonschema.protocols.Validator, doc: dict[str, Any]) -> list[str]:
    errors = sorted(validator.iter_errors(doc), key=lambda e: [str(part) for part in e.absolute_path])
    return [f"{_path(error)}: {error.message}" for error in errors]


def _path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(part) for part in error.absolute_path) or "<top>"


# Built-in kinds -----------------------------------------------------------------------------------------------


def _builtin_problems(doc: dict[str, Any]) -> list[str]:
    """kubernetes-validate's verdict; when it fails, every error its schema finds (it raises on the first)."""
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return [
            f"no schema for kind {doc['kind']} in apiVersion {doc['apiVersion']}: neither a Kubernetes "
            f"{KUBERNETES_VERSION} kind nor a custom resource of a CRD kept in {CRD_DIR}"
        ]
    except kubernetes_validate.ValidationError as first:
        return _schema_problems(_builtin_validator(doc["apiVersion"], doc["kind"]), doc) or [
            f"{_path(first)}: {first.message}"
        ]
    # The schemas leave metadata.name optional (the server may generate one); a manifest names its object.
    metadata = doc.get("metadata")
    if not isinstance(metadata, dict) or not metadata.get("name"):
        return ["metadata.name: a manifest names its object"]
    return []


@functools.cache
def _builtin_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    # The file kubernetes_validate.validate reads: "apps/v1" -> "apps-v1", "rbac.authorization.k8s.io/v1" ->
    # "rbac-v1", "v1" -> "v1".
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = _packaged_json(f"{kind.lower()}-{group_version}.json")
    return jsonschema.Draft202012Validator(schema, registry=_definitions_registry())


@functools.cache
def _definitions_registry() -> referencing.Registry[Any]:
    definitions = referencing.Resource.from_contents(_packaged_json("_definitions.json"))
    return definitions @ referencing.Registry()


@functools.cache
def _packaged_json(name: str) -> dict[str, Any]:
    text = importlib.resources.files("kubernetes_validate").joinpath(f"{_STRICT_SCHEMAS}/{name}").read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


# Custom resources ---------------------------------------------------------------------------------------------


def _crd_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
    if (api_version, kind) not in _crd_schemas():
        return None
    return _compiled_crd_validator(api_version, kind)


@functools.cache
def _compiled_crd_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    schema = _strict(copy.deepcopy(_crd_schemas()[(api_version, kind)]))
    # The API server validates the top-level metadata itself, as an ObjectMeta (whatever the CRD says of it);
    # a manifest also needs a name.
    schema["properties"]["metadata"] = {
        "allOf": [{"$ref": f"https://kubernetes.io/api/_definitions.json#/$defs/{_OBJECT_META}"}],
        "type": "object",
        "required": ["name"],
    }
    schema["required"] = sorted({*schema.get("required", ()), "apiVersion", "kind", "metadata"})
    # CRD schemas are OpenAPI 3.0 schema objects, whose keywords are draft 4's (exclusiveMinimum is a boolean).
    return jsonschema.Draft4Validator(schema, registry=_definitions_registry())


@functools.cache
def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the openAPIV3Schema of every served version of every kept CRD."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(CRD_DIR.iterdir()):
        if path.suffix not in (".yaml", ".json"):
            continue
        text = path.read_text()
        # The C loader where there is one: the KServe CRDs are megabytes of YAML.
        crd = json.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=_YAML_LOADER)
        spec = crd["spec"]
        for version in spec["versions"]:
            if version.get("served", False):
                key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                schemas[key] = version["schema"]["openAPIV3Schema"]
    return schemas


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The structural schema, in place, made to reject what the API server prunes (and Strict rejects)."""
    if schema.get("x-kubernetes-int-or-string") and "anyOf" not in schema:
        schema["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and isinstance(schema.get("type"), str):
        schema["type"] = [schema["type"], "null"]
    is_object = schema.get("type") == "object" or "properties" in schema
    if (
        is_object
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        # An object schema with neither keeps only the fields it declares (none, if it declares none).
        schema["additionalProperties"] = False
    # Only the structural keywords: the branches of anyOf/allOf/oneOf/not are value validations over the same
    # object (a `required` list, say), where a closed object would reject the fields the other branches declare.
    for child in schema.get("properties", {}).values():
        _strict(child)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            _strict(schema[key])
    return schema


__all__ = ["CRD_DIR", "KUBERNETES_VERSION", "load_documents", "validate_manifest"]
