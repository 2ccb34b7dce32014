"""A model's failure as Triton's python backend words it, for the server to pass on."""

from __future__ import annotations

import traceback
from pathlib import Path

# modelhost/backends: frames of ours (the stub, pb_utils), left out of what the user is shown.
_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent.parent)


class ExecuteError(Exception):
    """A model that broke the execute contract (wrong number of responses, ...): said as Triton says it, without
    an exception type or a traceback of ours."""


def error_text(error: BaseException) -> str:
    """An exception as Triton's python backend words it: the type and message, then where it happened in the
    model's own code (innermost first; the stub's frames are not the user's business)."""
    if isinstance(error, ExecuteError):
        return str(error)
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith(_PACKAGE_DIR)]
    where = "".join(f"  {f.filename}({f.lineno}): {f.name}\n" for f in reversed(frames))
    return f"{type(error).__name__}: {error}" + (f"\n\nAt:\n{where}" if where else "")
