"""Loaded by every Python process the runner starts (it is on their PYTHONPATH).

1. The folders of TRITON_QA_PYDEPS (packages a suite's test.sh pip-installs, installed by the runner into its
   cache) go at the end of sys.path: they add what the environment lacks and shadow nothing.
2. The numpy 1.x names that Triton 2.51's qa code and python models use (np.NINF, np.float_, ...) are restored
   where numpy 2 removed them. Triton's CI ran that code with numpy 1.x; this keeps a removed alias from failing
   a test for a reason that has nothing to do with the server.
"""

import os as _os
import sys as _sys

for _dir in _os.environ.get("TRITON_QA_PYDEPS", "").split(_os.pathsep):
    if _dir and _dir not in _sys.path:
        _sys.path.append(_dir)

try:
    import numpy as _np
except Exception:  # numpy missing or broken: nothing to restore
    pass
else:
    _ALIASES = {
        "NINF": -_np.inf,
        "PINF": _np.inf,
        "NAN": _np.nan,
        "NaN": _np.nan,
        "Inf": _np.inf,
        "Infinity": _np.inf,
        "infty": _np.inf,
        "float_": _np.float64,
        "complex_": _np.complex128,
        "cfloat": _np.complex128,
        "unicode_": _np.str_,
        "string_": _np.bytes_,
        "bool8": _np.bool_,
        "object0": _np.object_,
        "int0": _np.intp,
        "uint0": _np.uintp,
        "longfloat": _np.longdouble,
    }
    for _name, _value in _ALIASES.items():
        if _name not in _np.__dict__:
            setattr(_np, _name, _value)

# 3. Python 3.11 removed unittest.TestCase._feedErrorsToResult and _Outcome.errors, which Triton's qa code (written
#    for the Python 3.10 of its containers) uses in tearDown to ask whether the test failed. Both come back here,
#    answering from the result the test reports to.
import unittest.case as _uc  # noqa: E402

if not hasattr(_uc.TestCase, "_feedErrorsToResult"):

    def _outcome_errors(self):  # type: ignore[no-untyped-def]
        result = getattr(self, "result", None)
        found = list(getattr(result, "errors", [])) + list(getattr(result, "failures", []))
        return [(test, None) for test, _ in found]

    def _feed_errors_to_result(self, result, errors):  # type: ignore[no-untyped-def]
        for test, _ in errors:
            result.errors.append((test, ""))

    _uc._Outcome.errors = property(_outcome_errors)  # type: ignore[attr-defined]
    _uc.TestCase._feedErrorsToResult = _feed_errors_to_result  # type: ignore[attr-defined]
