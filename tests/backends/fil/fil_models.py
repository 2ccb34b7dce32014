"""Tiny tree models for the FIL backend's tests, trained at test time, and the files FIL reads them from.

Also imported by tests/e2e/test_backend_fil.py (as `backends.fil.fil_models`).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np
import numpy.typing as npt
import treelite
import xgboost as xgb

from modelhost.backends.fil.settings import MODEL_FILES

FEATURES = 6
Rows = npt.NDArray[np.float32]


def rows(count: int, features: int = FEATURES, seed: int = 0) -> Rows:
    """Rows around the training data's range, a few values missing (NaN), as FIL's own tests send."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((count, features)).astype(np.float32)
    if count > 3:
        data[3, 1] = np.nan
    return data


def _labels(data: Rows, classes: int) -> npt.NDArray[np.int64]:
    score = data[:, 0] + 0.5 * data[:, 1] * data[:, 2] - data[:, 3]
    if classes == 0:  # regression target
        return score  # type: ignore[return-value]
    edges = np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1])
    return np.digitize(score, edges).astype(np.int64)


def xgboost_model(
    objective: str, *, classes: int = 0, rounds: int = 10, features: int = FEATURES
) -> xgb.Booster:
    """A small XGBoost model: "reg:squarederror", "binary:logistic", "multi:softprob" (classes > 2), ..."""
    data = rows(400, features, seed=1)
    params: dict[str, Any] = {"objective": objective, "max_depth": 3, "eta": 0.3, "nthread": 1}
    if objective.startswith("multi:"):
        params["num_class"] = classes
    labels = _labels(np.nan_to_num(data), classes or (2 if objective.startswith("binary:") else 0))
    return xgb.train(params, xgb.DMatrix(data, labels), num_boost_round=rounds)


def lightgbm_model(
    objective: str, *, classes: int = 0, rounds: int = 10, features: int = FEATURES
) -> lgb.Booster:
    """A small LightGBM model: "regression", "binary", "multiclass" or "multiclassova" (classes > 2)."""
    data = rows(400, features, seed=1)
    params: dict[str, Any] = {"objective": objective, "num_leaves": 8, "verbose": -1, "num_threads": 1}
    if objective.startswith("multiclass"):
        params["num_class"] = classes
    labels = _labels(np.nan_to_num(data), classes or (2 if objective == "binary" else 0))
    return lgb.train(params, lgb.Dataset(data, labels), num_boost_round=rounds)


def legacy_binary(booster: xgb.Booster) -> bytes:
    """The model in XGBoost's legacy binary format (`xgboost.model`, FIL's default model_type), which XGBoost 3
    no longer writes: the layout Treelite's legacy loader reads (treelite src/model_loader/xgboost_legacy.cc),
    as XGBoost 1.7 wrote it. Single-output models only (the format has one base_score)."""
    learner = json.loads(booster.save_raw("json"))["learner"]
    params = learner["learner_model_param"]
    model = learner["gradient_booster"]["model"]
    trees = model["trees"]
    features = int(params["num_feature"])
    out = bytearray()
    # LearnerModelParam (136 bytes): base_score, num_feature, num_class, contain_extra_attrs,
    # contain_eval_metrics, major_version, minor_version, num_target, then reserved.
    base_score = float(params["base_score"].strip("[]"))
    out += struct.pack("<fIiiiIII", base_score, features, 0, 0, 0, 1, 7, 1).ljust(136, b"\0")
    for text in (learner["objective"]["name"].encode(), b"gbtree"):
        out += struct.pack("<Q", len(text)) + text
    # GBTreeModelParam (160 bytes): num_trees, num_parallel_tree, num_feature, pad, pad64, num_output_group,
    # size_leaf_vector, reserved.
    out += struct.pack("<iiiiqii", len(trees), 1, features, 0, 0, 1, 0).ljust(160, b"\0")
    for tree in trees:
        nodes = int(tree["tree_param"]["num_nodes"])
        out += struct.pack("<iiiiii", 1, nodes, 0, 0, features, 0).ljust(148, b"\0")  # TreeParam
        left, right, parents = tree["left_children"], tree["right_children"], tree["parents"]
        for i in range(nodes):
            parent = -1 if parents[i] == 2147483647 else parents[i]
            if parent >= 0 and left[parent] == i:
                parent |= 1 << 31  # the left child's mark
            index = tree["split_indices"][i] | (int(tree["default_left"][i]) << 31)
            out += struct.pack(
                "<IiiIf", parent & 0xFFFFFFFF, left[i], right[i], index, tree["split_conditions"][i]
            )
        for i in range(nodes):  # node statistics: loss_chg, sum_hess, base_weight, leaf_child_cnt
            out += struct.pack(
                "<fffi", tree["loss_changes"][i], tree["sum_hessian"][i], tree["base_weights"][i], 0
            )
    out += struct.pack(f"<{len(trees)}i", *model["tree_info"])
    return bytes(out)


def treelite_checkpoint(booster: xgb.Booster | lgb.Booster, path: Path) -> None:
    """The model as a Treelite checkpoint (`checkpoint.tl`)."""
    if isinstance(booster, xgb.Booster):
        model = treelite.frontend.from_xgboost_json(booster.save_raw("json"))
    else:
        model = treelite.frontend.from_lightgbm(booster)
    model.serialize(path)


def save(booster: xgb.Booster | lgb.Booster, path: Path, model_type: str) -> Path:
    """Write `booster` in the format `model_type` names."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if model_type == "xgboost":
        assert isinstance(booster, xgb.Booster)
        path.write_bytes(legacy_binary(booster))
    elif model_type in ("xgboost_json", "xgboost_ubj"):
        assert isinstance(booster, xgb.Booster)
        path.write_bytes(bytes(booster.save_raw("json" if model_type == "xgboost_json" else "ubj")))
    elif model_type == "lightgbm":
        assert isinstance(booster, lgb.Booster)
        booster.save_model(path)
    else:
        treelite_checkpoint(booster, path)
    return path


def config_text(
    model_type: str | None,
    *,
    features: int | None = FEATURES,
    output_dims: Sequence[int] | None = (1,),
    max_batch_size: int | None = 64,
    shap_dims: Sequence[int] | None = None,
    extra: str = "",
    **params: str,
) -> str:
    """A FIL config.pbtxt; `features`, `output_dims`, `max_batch_size` None leave them out (for auto-complete)."""
    lines = ['backend: "fil"']
    if max_batch_size is not None:
        lines.append(f"max_batch_size: {max_batch_size}")
    if features is not None:
        lines.append(f'input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ {features} ] }} ]')
    outputs = []
    if output_dims is not None:
        outputs.append(
            f'{{ name: "output__0" data_type: TYPE_FP32 dims: [ {", ".join(map(str, output_dims))} ] }}'
        )
    if shap_dims is not None:
        outputs.append(
            f'{{ name: "treeshap_output" data_type: TYPE_FP32 dims: [ {", ".join(map(str, shap_dims))} ] }}'
        )
    if outputs:
        lines.append(f"output [ {', '.join(outputs)} ]")
    if model_type is not None:
        params = {"model_type": model_type, **params}
    if params:
        entries = ", ".join(f'{{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in params.items())
        lines.append(f"parameters [ {entries} ]")
    lines.append(extra)
    return "\n".join(lines) + "\n"


__all__ = [
    "FEATURES",
    "MODEL_FILES",
    "config_text",
    "legacy_binary",
    "lightgbm_model",
    "rows",
    "save",
    "treelite_checkpoint",
    "xgboost_model",
]
