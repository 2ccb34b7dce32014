"""Platform, backend and default file names of Triton (core constants.h), shared by the config modules."""

from __future__ import annotations

from typing import Final

TENSORFLOW_GRAPHDEF_PLATFORM: Final = "tensorflow_graphdef"
TENSORFLOW_SAVEDMODEL_PLATFORM: Final = "tensorflow_savedmodel"
TENSORFLOW_GRAPHDEF_FILENAME: Final = "model.graphdef"
TENSORFLOW_SAVEDMODEL_FILENAME: Final = "model.savedmodel"
TENSORFLOW_BACKEND: Final = "tensorflow"

TENSORRT_PLATFORM: Final = "tensorrt_plan"
TENSORRT_FILENAME: Final = "model.plan"
TENSORRT_BACKEND: Final = "tensorrt"

ONNXRUNTIME_PLATFORM: Final = "onnxruntime_onnx"
ONNXRUNTIME_FILENAME: Final = "model.onnx"
ONNXRUNTIME_BACKEND: Final = "onnxruntime"

OPENVINO_FILENAME: Final = "model.xml"
OPENVINO_BACKEND: Final = "openvino"

PYTORCH_PLATFORM: Final = "pytorch_libtorch"
PYTORCH_PLATFORM_ALT: Final = "libtorch"
PYTORCH_FILENAME: Final = "model.pt"
PYTORCH_AOTI_PLATFORM: Final = "torch_aoti"
PYTORCH_AOTI_FILENAME: Final = "model.pt2"
PYTORCH_BACKEND: Final = "pytorch"

PYTHON_FILENAME: Final = "model.py"
PYTHON_BACKEND: Final = "python"

ENSEMBLE_PLATFORM: Final = "ensemble"

# Backends whose platform is fixed: backend -> the platforms it accepts. Other backends accept any platform.
KNOWN_BACKEND_PLATFORMS: Final[dict[str, frozenset[str]]] = {
    TENSORFLOW_BACKEND: frozenset({TENSORFLOW_GRAPHDEF_PLATFORM, TENSORFLOW_SAVEDMODEL_PLATFORM}),
    TENSORRT_BACKEND: frozenset({TENSORRT_PLATFORM}),
    ONNXRUNTIME_BACKEND: frozenset({ONNXRUNTIME_PLATFORM}),
    PYTORCH_BACKEND: frozenset({PYTORCH_PLATFORM, PYTORCH_PLATFORM_ALT, PYTORCH_AOTI_PLATFORM}),
}

# Backends that run on the CPU only: a model of theirs with no instance_group gets a KIND_CPU group, not KIND_AUTO
# (which would mean KIND_GPU on a GPU host), as Triton's OpenVINO backend asks for in its auto-complete.
CPU_ONLY_BACKENDS: Final = frozenset({OPENVINO_BACKEND})

# Backends whose KIND_CPU instance groups default to 2 instances instead of 1 (core SetDefaultInstanceCount).
DEFAULT_CPU_INSTANCE_COUNT: Final = 2
MULTI_CPU_INSTANCE_BACKENDS: Final = frozenset({TENSORFLOW_BACKEND, ONNXRUNTIME_BACKEND})

# sequence_batching.max_sequence_idle_microseconds when unset (1 s).
SEQUENCE_IDLE_DEFAULT_MICROSECONDS: Final = 1_000_000

# --backend-config=default-max-batch-size when unset: the max_batch_size auto-complete gives a batchable model.
DEFAULT_MAX_BATCH_SIZE: Final = 4
