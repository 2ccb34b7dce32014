"""Triton's python backend: `model.py` files with `TritonPythonModel`, one stub process per instance."""
