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

# 4. Stand-ins in the config overrides tests send: a load request whose JSON config names one of Triton's C++ test
#    backends (`"backend": "identity"`) gets the python stand-in, as the model folders do (models.py). Patched into
#    tritonclient's load_model once its client module is imported, in test processes only. Not where the runner
#    gives the server its stand-ins as python-based backends (TRITON_QA_BACKENDS): the names then stay.
import importlib.abc as _abc  # noqa: E402
import json as _json  # noqa: E402

_STAND_INS = _os.environ.get("TRITON_QA_STAND_INS", "")
_STAND_IN_BACKENDS = {"identity": "identity", "sequence": "sequence", "repeat": "repeat"}


def _stand_in_config(config):  # type: ignore[no-untyped-def]
    if not _STAND_INS or not isinstance(config, str) or _os.environ.get("TRITON_QA_BACKENDS"):
        # With TRITON_QA_BACKENDS the server has the stand-ins as python-based backends of the same names.
        return config
    try:
        parsed = _json.loads(config)
    except ValueError:
        return config
    if not isinstance(parsed, dict) or parsed.get("backend") not in _STAND_IN_BACKENDS:
        return config
    stand = _os.path.join(_STAND_INS, _STAND_IN_BACKENDS[parsed["backend"]], "model.py")
    parsed["backend"] = "python"
    parsed["default_model_filename"] = stand
    return _json.dumps(parsed)


def _patch_load_model(module):  # type: ignore[no-untyped-def]
    client = getattr(module, "InferenceServerClient", None)
    original = getattr(client, "load_model", None)
    if original is None or getattr(original, "_triton_qa", False):
        return

    def load_model(self, model_name, *args, **kwargs):  # type: ignore[no-untyped-def]
        if "config" in kwargs:
            kwargs["config"] = _stand_in_config(kwargs["config"])
        return original(self, model_name, *args, **kwargs)

    load_model._triton_qa = True  # type: ignore[attr-defined]
    client.load_model = load_model


class _PatchAfterImport(_abc.MetaPathFinder):
    TARGETS = ("tritonclient.http._client", "tritonclient.grpc._client")

    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname not in self.TARGETS:
            return None
        _sys.meta_path.remove(self)
        try:
            import importlib.util as _util

            spec = _util.find_spec(fullname)
        finally:
            _sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):  # type: ignore[no-untyped-def]
            exec_module(module)
            _patch_load_model(module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


if _STAND_INS:
    _sys.meta_path.insert(0, _PatchAfterImport())

# 5. Python 3.10 removed the ABC aliases of `collections` (collections.MutableMapping, ...), which boofuzz 0.3.0,
#    the version L0_http_fuzz's test.sh pins, still imports. They come back here as the collections.abc classes.
import collections as _collections  # noqa: E402
import collections.abc as _collections_abc  # noqa: E402

for _name in (
    "Callable",
    "Iterable",
    "Mapping",
    "MutableMapping",
    "MutableSequence",
    "MutableSet",
    "Sequence",
):
    if not hasattr(_collections, _name):
        setattr(_collections, _name, getattr(_collections_abc, _name))
