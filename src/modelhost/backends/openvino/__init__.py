"""OpenVINO backend (`backend: "openvino"`): OpenVINO IR (`model.xml` + `model.bin`), or any other format that
OpenVINO's `Core.read_model` reads (ONNX, TensorFlow, TensorFlow Lite, PaddlePaddle) named by
`default_model_filename`."""
