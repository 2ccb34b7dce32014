"""Optimization-profile shapes in trtexec's syntax, for `modelhost convert onnx-to-tensorrt`.

`--min-shapes input:1x3x224x224,mask:1x16` names each dynamic input with its shape; a name holding ':' or ','
is written in single quotes ('input:0':1x3). Give all three of --min-shapes/--opt-shapes/--max-shapes, or only
--opt-shapes for a profile of that one shape.
"""

from __future__ import annotations

from collections.abc import Sequence

from modelhost.backends.tensorrt.engine import ProfileShapes, Shape, shape_string


class ShapeSpecError(ValueError):
    pass


def _entries(text: str) -> list[str]:
    """Split at commas outside single quotes."""
    entries, current, quoted = [], "", False
    for char in text:
        if char == "'":
            quoted = not quoted
        if char == "," and not quoted:
            entries.append(current)
            current = ""
        else:
            current += char
    if quoted:
        raise ShapeSpecError(f"unbalanced quote in '{text}'")
    entries.append(current)
    return [e.strip() for e in entries if e.strip()]


def _dims(text: str, entry: str) -> Shape:
    if not text:
        raise ShapeSpecError(f"'{entry}' gives no shape: write name:1x3x224x224")
    try:
        dims = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        raise ShapeSpecError(
            f"'{entry}': the shape must be integers joined by 'x', as in 1x3x224x224"
        ) from None
    if any(d < 0 for d in dims):
        raise ShapeSpecError(f"'{entry}': dimensions must be 0 or more")
    return dims


def parse_shapes(text: str) -> dict[str, Shape]:
    """`name:1x3x224x224,other:1x10` -> {"name": (1, 3, 224, 224), "other": (1, 10)}."""
    shapes: dict[str, Shape] = {}
    for entry in _entries(text):
        if entry.startswith("'"):
            end = entry.find("'", 1)
            name, rest = entry[1:end], entry[end + 1 :]
            if not rest.startswith(":"):
                raise ShapeSpecError(f"'{entry}': a quoted name must be followed by ':' and a shape")
            dims_text = rest[1:]
        else:
            name, colon, dims_text = entry.rpartition(":")
            if not colon or not name:
                raise ShapeSpecError(f"'{entry}' is not name:shape (as in input:1x3x224x224)")
        if name in shapes:
            raise ShapeSpecError(f"input '{name}' is given twice")
        shapes[name] = _dims(dims_text.strip(), entry)
    return shapes


def build_profile(
    min_text: str | None, opt_text: str | None, max_text: str | None
) -> dict[str, ProfileShapes]:
    """The one optimization profile the three flags describe ({} when none is given)."""
    given = [t is not None for t in (min_text, opt_text, max_text)]
    if not any(given):
        return {}
    if opt_text is not None and min_text is None and max_text is None:
        opt = parse_shapes(opt_text)
        return {name: ProfileShapes(shape, shape, shape) for name, shape in opt.items()}
    if not all(given):
        raise ShapeSpecError(
            "give all three of --min-shapes, --opt-shapes and --max-shapes (or only --opt-shapes for a fixed "
            "shape)"
        )
    assert min_text is not None and opt_text is not None and max_text is not None
    low, opt, high = parse_shapes(min_text), parse_shapes(opt_text), parse_shapes(max_text)
    if not (low.keys() == opt.keys() == high.keys()):
        raise ShapeSpecError(
            "--min-shapes, --opt-shapes and --max-shapes must name the same inputs (got "
            f"{sorted(low)}, {sorted(opt)}, {sorted(high)})"
        )
    profile: dict[str, ProfileShapes] = {}
    for name in low:
        a, b, c = low[name], opt[name], high[name]
        if not len(a) == len(b) == len(c):
            raise ShapeSpecError(
                f"input '{name}': min, opt and max shapes must have the same number of dimensions"
            )
        if any(not (x <= y <= z) for x, y, z in zip(a, b, c, strict=True)):
            raise ShapeSpecError(
                f"input '{name}': each dimension must satisfy min <= opt <= max (got min {shape_string(a)}, opt "
                f"{shape_string(b)}, max {shape_string(c)})"
            )
        profile[name] = ProfileShapes(a, b, c)
    return profile


def check_against_network(profile: dict[str, ProfileShapes], inputs: Sequence[tuple[str, Shape]]) -> None:
    """The profile must cover every input with a dynamic dimension, name no other input, and agree with the
    network's fixed dimensions."""
    network = dict(inputs)
    unknown = sorted(set(profile) - set(network))
    if unknown:
        raise ShapeSpecError(f"the ONNX model has no input {unknown} (its inputs: {sorted(network)})")
    for name, shape in inputs:
        shapes = profile.get(name)
        if shapes is None:
            if -1 in shape:
                raise ShapeSpecError(
                    f"input '{name}' has the dynamic shape {shape_string(shape)}: give its range with "
                    "--min-shapes, --opt-shapes and --max-shapes (as in "
                    f"{name}:{'x'.join('1' if d == -1 else str(d) for d in shape)})"
                )
            continue
        for which, dims in (("min", shapes.min), ("opt", shapes.opt), ("max", shapes.max)):
            if len(dims) != len(shape) or any(d not in (-1, s) for d, s in zip(shape, dims, strict=True)):
                raise ShapeSpecError(
                    f"input '{name}': the {which} shape {shape_string(dims)} does not fit the model's shape "
                    f"{shape_string(shape)}"
                )


__all__ = ["ShapeSpecError", "build_profile", "check_against_network", "parse_shapes"]
