"""The suites the runner knows, in the order it runs them: one recipe module per suite."""

from __future__ import annotations

import importlib

from triton_qa.core import Suite

ORDER = [
    "L0_infer",
    "L0_infer_zero",
    "L0_sequence_batcher",
    "L0_trace",
    "L0_client_timeout",
    "L0_nan_inf",
    "L0_http",
    "L0_request_cancellation",
    "L0_batcher",
    "L0_shared_memory",
    "L0_optional_input",
    "L0_scalar_io",
    "L0_backend_python",
    "L0_logging",
    "L0_model_config",
    "L0_lifecycle",
    "L0_model_update",
    "L0_implicit_state",
    "L0_ragged_batching",
    "L0_metrics",
    "L0_http_fuzz",
    "L0_input_validation",
    "L0_large_payload",
]


def _load() -> dict[str, Suite]:
    suites: dict[str, Suite] = {}
    for name in ORDER:
        try:
            module = importlib.import_module(f"triton_qa.suites.{name.lower()}")
        except ModuleNotFoundError as e:
            if e.name != f"triton_qa.suites.{name.lower()}":
                raise
            continue
        suites[name] = module.SUITE
    return suites


SUITES: dict[str, Suite] = _load()
