"""TensorRT backend (`backend: "tensorrt"`, `platform: "tensorrt_plan"`, `model.plan`).

Only `adapter.py` imports the `tensorrt` package and only `cuda.py` the CUDA runtime bindings; everything else
works on plain descriptions of the engine (`engine.py`) so that it runs, and is tested, without a GPU.
"""
