"""--backend-config: the settings honoured, by backend, and the check of their values."""

from __future__ import annotations

from modelhost.options.values import bool_or_none

# --backend-config settings honoured today, by backend ("" = the global settings that apply to every backend).
# Values are non-negative integers, but for the names in TEXT_BACKEND_CONFIG.
HONOURED_BACKEND_CONFIG: dict[str, tuple[str, ...]] = {
    "": ("default-max-batch-size",),
    "onnxruntime": ("default-max-batch-size", "intra_op_thread_count", "inter_op_thread_count"),
    "python": (
        "shm-default-byte-size",
        "shm-growth-byte-size",
        "stub-timeout-seconds",
        "shm-region-prefix-name",
        # Models' own environments (ours: docs/python-backend.md).
        "env-cache-dir",
        "env-index-url",
        "env-find-links",
        "env-no-index",
    ),
    # execution-policy and coalesce-request-input are accepted for tritonserver command lines and have no effect
    # (modelhost runs one batch per instance at a time, and copies each request's inputs): docs/backends/tensorrt.md.
    "openvino": ("default-max-batch-size",),
    "fil": ("default-max-batch-size", "cpu_nthread"),
    "tensorflow": ("default-max-batch-size", "version"),
    "tensorrt": ("version-compatible", "plugins", "execution-policy", "coalesce-request-input"),
}
TEXT_BACKEND_CONFIG = frozenset({"shm-region-prefix-name"})
# Settings that are a path or a URL (any text but empty), and booleans.
LOCATION_BACKEND_CONFIG = frozenset({"env-cache-dir", "env-index-url", "env-find-links"})
BOOLEAN_BACKEND_CONFIG = frozenset({"env-no-index"})
# Settings whose values the backend checks when it loads a model (paths, booleans, names).
BACKEND_CHECKED_CONFIG = frozenset(
    {"version-compatible", "plugins", "execution-policy", "coalesce-request-input"}
)


def backend_config_problems(config: dict[str, dict[str, str]]) -> list[str]:
    problems: list[str] = []
    for backend, settings in config.items():
        honoured = HONOURED_BACKEND_CONFIG.get(backend)
        for key, value in settings.items():
            where = f"{backend},{key}" if backend else key
            if honoured is None or key not in honoured:
                problems.append(f"--backend-config {where} is not supported yet")
            elif key in BACKEND_CHECKED_CONFIG:
                continue
            elif key in LOCATION_BACKEND_CONFIG:
                if not value.strip():
                    problems.append(f"--backend-config {where} must be a path or a URL, got nothing")
            elif key in BOOLEAN_BACKEND_CONFIG:
                if bool_or_none(value) is None:
                    problems.append(f"--backend-config {where} must be true or false, got {value!r}")
            elif key in TEXT_BACKEND_CONFIG:
                if not value or "/" in value or any(c.isspace() for c in value):
                    problems.append(
                        f"--backend-config {where} must be a name without spaces or '/', got {value!r}"
                    )
            elif not value.isdigit():
                problems.append(f"--backend-config {where} must be an integer 0 or more, got {value!r}")
    return problems
