"""Fails at import, before TritonPythonModel exists."""

raise ImportError("import_error: this model fails at import on purpose")
