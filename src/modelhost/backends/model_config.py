"""A model's configuration completed as Triton loads it, with its backend's own hooks:

1. read `<model>/configs/<name>.pbtxt` (with --model-config-name) or `<model>/config.pbtxt`; without either,
   start from an empty config when auto-complete is enabled (else fail, as Triton does);
2. fill platform / backend / default_model_filename (always, even with auto-complete disabled);
3. normalise and check what Triton checks before the backend sees the config;
4. auto-complete from the model (the backend's hook: backends/registry.py) unless disabled;
5. normalise again (preferred batch sizes, instance groups, ...) and validate everything.

The steps without a backend are `modelhost.config`'s; this module puts the backends' hooks between them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelhost.backends.registry import autocomplete, runs_on_gpu
from modelhost.config.backend_fill import fill_backend_fields
from modelhost.config.constants import DEFAULT_MAX_BATCH_SIZE
from modelhost.config.files import CONFIG_FILENAME, config_path, read_config
from modelhost.config.invalid import InvalidConfig
from modelhost.config.normalize import normalize_config
from modelhost.config.validate import check_config, validate_config
from modelhost.errors import ModelConfigError


def complete_model_config(
    config: ModelConfig,
    model_dir: Path,
    *,
    source: str,
    auto_complete: bool = True,
    default_max_batch_size: int | Mapping[str, int] = DEFAULT_MAX_BATCH_SIZE,
    gpu_count: int = 0,
    model_name: str = "",
    backend_config: Mapping[str, Mapping[str, str]] | None = None,
) -> ModelConfig:
    """Steps 2-5 of the pipeline on a parsed config (from a file or a load request's override).

    Returns a completed copy; `config` itself is not changed. `source` names the config in error messages.
    `default_max_batch_size`: one value, or one per backend name ("" for the others).
    `model_name`: the name the model is served as when it is not its directory's (a directory registered under
    another name, as SageMaker's multi-model load does): the config takes that name.
    `backend_config`: --backend-config by backend name ("" = global), for the backend's auto-complete hook.
    """
    completed = ModelConfig()
    completed.CopyFrom(config)
    if model_name and model_name != model_dir.name:
        completed.name = model_name
    else:
        model_name = model_dir.name
    fill_backend_fields(completed, model_name, model_dir)
    # Asked only on a GPU host: the answer may import the backend's framework.
    gpu_backend = gpu_count == 0 or runs_on_gpu(completed.backend, model_name)
    normalize_config(completed, model_name, gpu_count=gpu_count, gpu_backend=gpu_backend)
    try:
        check_config(completed, model_name, gpu_count, complete=False)
    except InvalidConfig as err:
        raise ModelConfigError(f"{err.message} (in {source})") from None
    if isinstance(default_max_batch_size, Mapping):
        # --backend-config=<backend>,default-max-batch-size wins over the global setting for that backend's models.
        default_max_batch_size = default_max_batch_size.get(
            completed.backend, default_max_batch_size.get("", DEFAULT_MAX_BATCH_SIZE)
        )
    # The backend's own hook (the model file's inputs and outputs, a python model's auto_complete_config).
    if auto_complete and autocomplete(
        completed, model_dir, default_max_batch_size=default_max_batch_size, backend_config=backend_config
    ):
        normalize_config(completed, model_name, gpu_count=gpu_count, gpu_backend=gpu_backend)
    validate_config(completed, model_name, source, gpu_count)
    return completed


def load_model_config(
    model_dir: Path,
    *,
    config_name: str | None = None,
    auto_complete: bool = True,
    default_max_batch_size: int | Mapping[str, int] = DEFAULT_MAX_BATCH_SIZE,
    gpu_count: int = 0,
    served_name: str = "",
    backend_config: Mapping[str, Mapping[str, str]] | None = None,
) -> ModelConfig:
    """The completed, normalised and validated config of the model in `model_dir` (named after its dir, or
    `served_name`: see complete_model_config)."""
    model_name = model_dir.name
    path = config_path(model_dir, config_name)
    if path is None:
        if not auto_complete:
            missing = model_dir / CONFIG_FILENAME
            raise ModelConfigError(
                f"failed to open text file for read {missing}: No such file or directory (model "
                f"'{model_name}' has no configuration file, and auto-complete is disabled so none can be "
                "generated)"
            )
        config = ModelConfig()
        source = f"auto-generated configuration, no {CONFIG_FILENAME} in {model_dir}"
    else:
        config = read_config(path, model_name)
        source = str(path)
    return complete_model_config(
        config,
        model_dir,
        source=source,
        auto_complete=auto_complete,
        default_max_batch_size=default_max_batch_size,
        gpu_count=gpu_count,
        model_name=served_name,
        backend_config=backend_config,
    )


__all__ = ["complete_model_config", "load_model_config"]
