"""tritonclient helpers shared by end-to-end tests: one protocol's client and how its errors read."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

InferResult = httpclient.InferResult | grpcclient.InferResult


@dataclass
class Api:
    """One protocol: its tritonclient module and client, and how its errors read."""

    name: str
    module: ModuleType
    client: Any  # httpclient.InferenceServerClient | grpcclient.InferenceServerClient

    def inputs(self, **arrays: np.ndarray) -> list[Any]:
        tensors = []
        for name, array in arrays.items():
            tensor = self.module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        return tensors

    def infer(self, model: str, **arrays: np.ndarray) -> InferResult:
        return self.client.infer(model, self.inputs(**arrays))

    def status(self, http_status: int, grpc_code: grpc.StatusCode) -> str:
        """What InferenceServerException.status() says over this protocol: "500" or "StatusCode.INTERNAL"."""
        return str(http_status) if self.name == "http" else str(grpc_code)


def fp32(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def failure(call: Callable[[], object]) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call()
    return caught.value


def poll(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")
