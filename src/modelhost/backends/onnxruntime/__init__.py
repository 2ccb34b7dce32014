"""ONNX Runtime backend (`backend: "onnxruntime"`, `platform: "onnxruntime_onnx"`, `model.onnx`)."""
