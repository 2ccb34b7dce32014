"""Tiny torch modules for the PyTorch backend's tests, and how to save them as TorchScript.

TorchScript compiles from source, so the modules live in this file; the unit tests and the end-to-end module both
build their model.pt files from them at test time.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch


class AddSub(torch.nn.Module):
    """forward(x, y) -> (x + y, x - y)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + y, x - y


class Scale(torch.nn.Module):
    """forward(a, b) -> a * 2 + b: tells apart which input fed which argument."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * 2 + b


class RowSum(torch.nn.Module):
    """forward(x [B, 2, 2]) -> its sum over the last dimension [B, 2]: a model that sees a reshaped input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=-1)


class DictIO(torch.nn.Module):
    """forward({"a", "b"}) -> {"sum", "prod"}."""

    def forward(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"sum": inputs["a"] + inputs["b"], "prod": inputs["a"] * inputs["b"]}


class Upper(torch.nn.Module):
    """forward(List[str]) -> (List[str] upper-cased, the lengths as INT64)."""

    def forward(self, words: list[str]) -> tuple[list[str], torch.Tensor]:
        lengths = [len(w) for w in words]
        return [w.upper() for w in words], torch.tensor(lengths, dtype=torch.int64)


class Identity10(torch.nn.Module):
    """Ten tensors in, the same ten out, one per datatype the backend carries."""

    def forward(
        self,
        b: torch.Tensor,
        u8: torch.Tensor,
        i8: torch.Tensor,
        i16: torch.Tensor,
        i32: torch.Tensor,
        i64: torch.Tensor,
        f16: torch.Tensor,
        f32: torch.Tensor,
        f64: torch.Tensor,
        bf16: torch.Tensor,
    ) -> tuple[
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
    ]:
        return (
            ~b,
            u8 + 1,
            i8 - 1,
            i16 * 2,
            i32 + 3,
            i64 * 3,
            f16 * 2,
            f32 + 0.5,
            f64 * 0.5,
            bf16 * 2,
        )


class TwoOfList(torch.nn.Module):
    """Returns a List[Tensor] of two: how many outputs it has is known only once it runs."""

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [x + 1, x + 2]


class ToDouble(torch.nn.Module):
    """Returns FP64 whatever comes in: a model whose output dtype contradicts an FP32 config."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.double()


class Total(torch.nn.Module):
    """Returns a scalar, which Triton refuses as an output."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum()


class FirstRow(torch.nn.Module):
    """Returns the first row only: a batching model's output without the batch dimension."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[0]


class Counter(torch.nn.Module):
    """Counts its calls in an attribute: tells whether instances share one module."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = torch.zeros(1, dtype=torch.int64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x + self.calls.to(x.dtype)


class Optional2(torch.nn.Module):
    """forward(x, bias: Optional[Tensor]): a type Triton's backend refuses."""

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if bias is None:
            return x
        return x + bias


def script(module: torch.nn.Module) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13 deprecates TorchScript
        scripted: torch.jit.ScriptModule = torch.jit.script(module)
    return scripted


def trace(module: torch.nn.Module, *examples: torch.Tensor) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        traced: torch.jit.ScriptModule = torch.jit.trace(module, examples)  # type: ignore[no-untyped-call]
    return traced


def save(module: torch.jit.ScriptModule, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module.save(str(path))
    return path


def load(path: Path) -> torch.jit.ScriptModule:
    """The saved module, as the tests' reference for what the server must answer."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        loaded: torch.jit.ScriptModule = torch.jit.load(str(path))  # type: ignore[no-untyped-call]
    return loaded
