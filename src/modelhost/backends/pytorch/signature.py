"""What a TorchScript module's forward() takes and returns, as far as its schema says.

TorchScript keeps argument names and types (Tensor, List[str], Dict[str, Tensor], ...) and the return type, but not
dtypes nor shapes: that is all a load can check (Triton's backend reads the same schema). Read here into plain
data, so that the binding rules (naming.py) need no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

# A forward() argument: a tensor, a list of strings (how TorchScript takes BYTES), the single dict of tensors Triton
# allows, or anything else (refused at load).
ArgKind = Literal["tensor", "strings", "tensor_dict", "other"]
# What forward() returns: one tensor, one list of strings, a tuple of those, a list or dict of tensors, or a type
# whose outputs are known only once it runs ("other": Any, Optional, ...).
ReturnKind = Literal["tensor", "strings", "tuple", "tensor_list", "tensor_dict", "other"]
ElementKind = Literal["tensor", "strings", "other"]


@dataclass(frozen=True, slots=True)
class Argument:
    name: str
    kind: ArgKind
    type_name: str


@dataclass(frozen=True, slots=True)
class Returns:
    kind: ReturnKind
    type_name: str
    elements: tuple[ElementKind, ...] = ()  # of a tuple, in order

    @property
    def count(self) -> int | None:
        """How many outputs forward() returns, where its type says."""
        if self.kind in ("tensor", "strings"):
            return 1
        if self.kind == "tuple":
            return len(self.elements)
        return None

    def element(self, index: int) -> ElementKind | None:
        """The kind of output `index`, where the type says."""
        if self.kind in ("tensor", "strings"):
            return self.kind if index == 0 else None
        if self.kind == "tuple" and index < len(self.elements):
            return self.elements[index]
        if self.kind == "tensor_list":
            return "tensor"
        return None


@dataclass(frozen=True, slots=True)
class Signature:
    arguments: tuple[Argument, ...]  # `self` left out
    returns: Returns


def _is_string_list(jit_type: Any) -> bool:
    return bool(jit_type.kind() == "ListType" and jit_type.getElementType().kind() == "StringType")


def _is_tensor_dict(jit_type: Any) -> bool:
    return bool(
        jit_type.kind() == "DictType"
        and jit_type.getKeyType().kind() == "StringType"
        and jit_type.getValueType().kind() == "TensorType"
    )


def _argument_kind(jit_type: Any) -> ArgKind:
    if jit_type.kind() == "TensorType":
        return "tensor"
    if _is_string_list(jit_type):
        return "strings"
    if _is_tensor_dict(jit_type):
        return "tensor_dict"
    return "other"


def _element_kind(jit_type: Any) -> ElementKind:
    if jit_type.kind() == "TensorType":
        return "tensor"
    return "strings" if _is_string_list(jit_type) else "other"


def _returns(jit_types: list[Any]) -> Returns:
    if len(jit_types) != 1:  # TorchScript methods return one value; a tuple is one TupleType
        return Returns("other", "(" + ", ".join(str(t) for t in jit_types) + ")")
    jit_type = jit_types[0]
    name, kind = str(jit_type), jit_type.kind()
    if kind == "TensorType":
        return Returns("tensor", name)
    if kind == "TupleType":
        return Returns("tuple", name, tuple(_element_kind(t) for t in jit_type.elements()))
    if _is_string_list(jit_type):
        return Returns("strings", name)
    if kind == "ListType" and jit_type.getElementType().kind() == "TensorType":
        return Returns("tensor_list", name)
    if _is_tensor_dict(jit_type):
        return Returns("tensor_dict", name)
    return Returns("other", name)


def forward_signature(module: Any) -> Signature:
    """The signature of a loaded TorchScript module's forward(); AttributeError where it has none."""
    schema = module.forward.schema
    arguments = list(schema.arguments)
    # The first argument of a method is the module itself (a class type), as Triton's backend skips it.
    if arguments and arguments[0].type.kind() == "ClassType":
        arguments = arguments[1:]
    return Signature(
        tuple(Argument(a.name, _argument_kind(a.type), str(a.type)) for a in arguments),
        _returns([r.type for r in schema.returns]),
    )


__all__ = ["ArgKind", "Argument", "ElementKind", "ReturnKind", "Returns", "Signature", "forward_signature"]
