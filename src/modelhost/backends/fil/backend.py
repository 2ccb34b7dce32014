"""The FIL backend (`backend: "fil"`): one loaded tree model per instance, predicted on CPU.

Each instance loads its own copy of the model (as Triton's FIL does) and predicts with the library chosen for
its model_type (forest.py), with `cpu_nthread` threads or, unset, its share of the cores (settings.py). The
libraries release the GIL while they predict, so instances run in parallel.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from modelhost.backends.api import Arrays, BackendContext
from modelhost.backends.fil.answers import OutputPlan, answer_shape
from modelhost.backends.fil.autocomplete import autocomplete_fil
from modelhost.backends.fil.files import model_file
from modelhost.backends.fil.forest import Forest, LoadOptions, load_forest
from modelhost.backends.fil.gpu import gpu_device
from modelhost.backends.fil.io_check import INPUT, OUTPUT, OutputLayout, check_model_config
from modelhost.backends.fil.settings import FilSettings, read_settings, require_is_classifier
from modelhost.errors import BackendInvalidArgument, InternalError, ModelhostError
from modelhost.host.gpu_memory import check_load_limit

log = logging.getLogger(__name__)


class FilInstance:
    def __init__(
        self, name: str, model_name: str, forest: Forest, plan: OutputPlan, layouts: dict[str, OutputLayout]
    ) -> None:
        self.name = name
        self.model_name = model_name
        self.forest = forest
        self.plan = plan
        self.layouts = layouts

    def _rows(self, inputs: Arrays) -> np.ndarray[Any, np.dtype[np.float32]]:
        rows = inputs[INPUT]
        features = self.forest.facts.n_features
        # Dims of -1 in the config let any width through the request checks: FIL would read rows of the
        # model's width across the row boundaries; refuse instead.
        if rows.ndim != 2 or rows.shape[1] != features:
            raise BackendInvalidArgument(
                f"model '{self.model_name}': input '{INPUT}' has shape {list(rows.shape)}, but the model takes "
                f"rows of {features} features"
            )
        return np.ascontiguousarray(rows, dtype=np.float32)

    def execute(self, inputs: Arrays, output_names: list[str]) -> Arrays:
        rows = self._rows(inputs)
        count = rows.shape[0]
        answers: Arrays = {}
        try:
            for name in output_names:
                layout = self.layouts[name]
                if count == 0:
                    values = np.zeros((0, layout.width), dtype=np.float32)
                elif name == OUTPUT:
                    values = self.plan.decide(self.forest.scores(rows), layout.width)
                else:
                    values = self.forest.shap(rows)
                answers[name] = values.reshape(answer_shape(count, layout.per_row_dims))
        except ModelhostError:
            raise
        except Exception as e:  # a library fault fails this batch only
            raise InternalError(f"FIL error for model '{self.model_name}': {e}") from e
        return answers

    def close(self) -> None:
        self.forest.close()


def _load_options(ctx: BackendContext, settings: FilSettings, device: str | None) -> LoadOptions:
    return LoadOptions(
        model_name=ctx.model_name,
        model_type=settings.model_type,
        predict_proba=settings.predict_proba,
        allow_unknown_field=settings.xgboost_allow_unknown_field,
        threads=settings.threads(ctx.total_instances),
        device=device,
        transfer_threshold=settings.transfer_threshold,
    )


class FilBackend:
    name = "fil"

    @staticmethod
    def autocomplete(
        config: Any, model_dir: Path, *, default_max_batch_size: int, settings: Mapping[str, str]
    ) -> None:
        """is_classifier, inputs, outputs and max_batch_size from the model file (a modelhost addition)."""
        autocomplete_fil(config, model_dir, default_max_batch_size=default_max_batch_size)

    def load_instance(self, ctx: BackendContext, group: Any, index: int, device_id: int) -> FilInstance:
        settings = read_settings(ctx.config, ctx.backend_config)
        is_classifier = require_is_classifier(ctx.config, settings)
        if settings.use_experimental_optimizations:
            log.info(
                "model '%s': use_experimental_optimizations has no effect in modelhost (it picks the fastest "
                "CPU predictor it has; Triton deprecated the option in 25.09)",
                ctx.model_name,
            )
        device = gpu_device(ctx.model_name, group, device_id, ctx.gpu_count, settings.model_type)
        path = model_file(
            ctx.model_name,
            ctx.version,
            ctx.version_dir,
            ctx.config.default_model_filename,
            settings.model_type,
        )
        forest = load_forest(path, _load_options(ctx, settings, device))
        try:
            plan = OutputPlan(
                is_classifier, settings.predict_proba, settings.threshold, forest.facts.n_classes
            )
            layouts = check_model_config(ctx.model_name, ctx.config, forest.facts, plan)
            instance = FilInstance(f"{group.name}_{index}", ctx.model_name, forest, plan, layouts)
            if device is not None:
                # After the model is on the GPU, as tritonserver checks: its own memory counts.
                check_load_limit(ctx.gpu_memory, instance.name, device_id)
        except BaseException:
            forest.close()
            raise
        return instance


__all__ = ["FilBackend", "FilInstance"]
