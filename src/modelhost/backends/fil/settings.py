"""The FIL parameters of a model config (Triton's fil_backend `src/shared_state.h`, release 25.09 and later).

Every parameter of Triton's FIL is accepted: the ones that decide the answers (`model_type`, `is_classifier`,
`predict_proba`, `threshold`) are honoured exactly; `cpu_nthread` sizes the CPU predictor's threads; the ones
that only tune FIL's GPU kernels (`layout`, `chunk_size`, `transfer_threshold`) are read and checked but change
nothing on CPU. Names that 25.09 replaced (`algo`, `threads_per_tree`, `output_class`) and removed
(`storage_type`, `blocks_per_sm`) are accepted with a warning, as Triton does; `output_class` is still honoured
and, as in Triton, wins over `is_classifier` when both are set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from modelhost.backends.cpu_threads import default_intra_op_threads
from modelhost.backends.params import bool_param, choice_param, float_param, int_param, param, warn_removed
from modelhost.errors import ModelConfigError
from modelhost.host.devices import cpu_count

# model_type -> the file a version directory holds when the config names no default_model_filename.
MODEL_FILES: dict[str, str] = {
    "xgboost": "xgboost.model",  # XGBoost's legacy binary format, FIL's default model_type
    "xgboost_json": "xgboost.json",
    "xgboost_ubj": "xgboost.ubj",
    "lightgbm": "model.txt",
    "treelite_checkpoint": "checkpoint.tl",
}
DEFAULT_MODEL_TYPE = "xgboost"
LAYOUTS = ("depth_first", "breadth_first", "layered")

_REPLACED = {
    "algo": "it was replaced by 'layout' in Triton 25.09 (it has no effect on CPU either way)",
    "threads_per_tree": "it was replaced by 'chunk_size' in Triton 25.09 (it has no effect on CPU either way)",
    "output_class": "it was replaced by 'is_classifier' in Triton 25.09; its value is still honoured",
    "storage_type": "it was removed in Triton 25.09 and is ignored",
    "blocks_per_sm": "it was removed in Triton 25.09 and is ignored",
}
# Integers FIL reads without a range (chunk_size < 1 means 1, cpu_nthread <= 0 means every core).
_ANY_INT = -(2**31)


@dataclass(frozen=True, slots=True)
class FilSettings:
    model_type: str
    # None when the config sets neither `is_classifier` nor `output_class` (Triton then refuses to load;
    # auto-complete fills it from the model's objective first).
    is_classifier: bool | None
    predict_proba: bool
    threshold: float
    # As configured: None when unset (a share of the cores, see `threads`), <= 0 for every core.
    cpu_nthread: int | None
    xgboost_allow_unknown_field: bool
    transfer_threshold: int
    layout: str
    chunk_size: int
    use_experimental_optimizations: bool

    def threads(self, total_instances: int) -> int:
        """Threads of one instance's CPU predictor. FIL's default (-1) is every core for each instance; unset,
        modelhost shares the cores but one among the model's instances instead (backends/cpu_threads.py), so
        that `count: 4` does not start 4 x cores busy threads."""
        if self.cpu_nthread is None:
            return default_intra_op_threads(total_instances)
        if self.cpu_nthread <= 0:
            return cpu_count()
        return self.cpu_nthread

    @property
    def classifier(self) -> bool:
        return bool(self.is_classifier)


def model_type(config: Any) -> str:
    return choice_param(config, "model_type", tuple(MODEL_FILES), DEFAULT_MODEL_TYPE)


def configured_classifier(config: Any) -> bool | None:
    """`is_classifier` as the config sets it (or the old `output_class`), None when it sets neither."""
    # Triton honours `output_class` only when it reads exactly "true" or "false", and then over is_classifier.
    old = param(config, "output_class")
    if old is not None and old.strip().lower() in ("true", "false"):
        return old.strip().lower() == "true"
    if param(config, "is_classifier") is None:
        return None
    return bool_param(config, "is_classifier", False)


def read_settings(config: Any, backend_config: dict[str, str] | None = None) -> FilSettings:
    """The model's FIL settings; `backend_config` (--backend-config=fil,cpu_nthread=N) supplies cpu_nthread
    where the model does not set it. Raises ModelConfigError naming a parameter with a bad value."""
    warn_removed(config, _REPLACED, "fil")
    is_classifier = configured_classifier(config)
    threshold = float_param(config, "threshold")
    # From the CLI (which takes integers >= 0 only), 0 means FIL's -1: every core.
    nthread = int_param(config, "cpu_nthread", fallback=backend_config, minimum=_ANY_INT)
    return FilSettings(
        model_type=model_type(config),
        is_classifier=is_classifier,
        predict_proba=bool_param(config, "predict_proba", False),
        threshold=0.5 if threshold is None else threshold,
        cpu_nthread=nthread,
        xgboost_allow_unknown_field=bool_param(config, "xgboost_allow_unknown_field", False),
        transfer_threshold=int_param(config, "transfer_threshold") or 0,
        layout=choice_param(config, "layout", LAYOUTS, "depth_first"),
        chunk_size=max(1, int_param(config, "chunk_size", minimum=_ANY_INT) or 1),
        use_experimental_optimizations=bool_param(config, "use_experimental_optimizations", False),
    )


def require_is_classifier(config: Any, settings: FilSettings) -> bool:
    """Triton's FIL cannot load a model whose config does not say whether it is a classifier."""
    if settings.is_classifier is None:
        raise ModelConfigError(
            f"unable to load model '{config.name}': required parameter 'is_classifier' not found in config "
            '(add parameters { key: "is_classifier" value: { string_value: "true" } } for a classifier, '
            '"false" for a regressor; auto-complete fills it from the model when it is on)'
        )
    return settings.is_classifier


__all__ = [
    "DEFAULT_MODEL_TYPE",
    "LAYOUTS",
    "MODEL_FILES",
    "FilSettings",
    "configured_classifier",
    "model_type",
    "read_settings",
    "require_is_classifier",
]
