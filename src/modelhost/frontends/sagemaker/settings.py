"""What the SageMaker listener reads from the environment, as Triton's SageMaker server reads it at startup."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

# Triton's default when no default model is named: requests to /invocations then fail with an unknown model.
UNSPECIFIED_DEFAULT_MODEL = "unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"
INFERENCE_TYPES = ("infer", "generate", "generate_stream")
# Where SageMaker puts the models of a multi-model endpoint; POST /models accepts urls under it only.
# MODELHOST_SAGEMAKER_MODEL_ROOT moves it (tests, or a container that mounts the models elsewhere).
DEFAULT_MODEL_ROOT = "/opt/ml/models"

InferenceType = Literal["infer", "generate", "generate_stream"]


class SageMakerSettingsError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class SageMakerSettings:
    # "live": /ping answers whether the server is live; anything else: whether it is ready (Triton's rule).
    ping_mode: str = "ready"
    default_model: str = UNSPECIFIED_DEFAULT_MODEL
    inference_type: InferenceType = "infer"
    model_root: str = DEFAULT_MODEL_ROOT

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> SageMakerSettings:
        env = os.environ if environ is None else environ
        inference_type = env.get("SAGEMAKER_TRITON_INFERENCE_TYPE", "infer")
        if inference_type not in INFERENCE_TYPES:
            # Triton starts and answers 400 to every /invocations; a server that cannot serve should not start.
            raise SageMakerSettingsError(
                f"invalid SAGEMAKER_TRITON_INFERENCE_TYPE '{inference_type}': must be one of "
                f"{', '.join(INFERENCE_TYPES)}"
            )
        root = env.get("MODELHOST_SAGEMAKER_MODEL_ROOT", DEFAULT_MODEL_ROOT).rstrip("/") or "/"
        if not root.startswith("/"):
            raise SageMakerSettingsError(
                f"MODELHOST_SAGEMAKER_MODEL_ROOT must be an absolute path, got '{root}'"
            )
        return cls(
            ping_mode=env.get("SAGEMAKER_TRITON_PING_MODE", "ready"),
            default_model=env.get("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME", UNSPECIFIED_DEFAULT_MODEL),
            inference_type=inference_type,  # type: ignore[arg-type]  # checked above
            model_root=root,
        )
