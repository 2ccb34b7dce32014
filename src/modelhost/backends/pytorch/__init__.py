"""PyTorch backend (`backend: "pytorch"`): TorchScript (`platform: "pytorch_libtorch"`, `model.pt`) and AOTInductor
packages (`platform: "torch_aoti"`, `model.pt2`). See docs/backends/pytorch.md.

Modules: backend.py (the entry point the registry names), settings.py (config parameters), threads.py (torch's
process-global thread pools), placement.py (instance kinds and devices), signature.py and naming.py (which
forward() argument a config input feeds, which returned value a config output is), tensors.py (numpy <-> torch),
results.py (a forward() result as config outputs), sharing.py (ENABLE_WEIGHT_SHARING), torchscript.py and aoti.py
(the instances), call_spec.py (an AOTInductor package's input and output names), aoti_probe.py (the load-time
check of a config against an AOTInductor package).
"""
