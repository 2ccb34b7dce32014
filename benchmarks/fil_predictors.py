"""Which CPU predictor the FIL backend should use per model type: the framework's own predictor or Treelite's
GTIL (what Triton's FIL backend runs on CPU), timed in this process on the same model and rows.

Trains an XGBoost and a LightGBM model (binary classifiers, `--trees` trees of depth `--depth` on
`--features` features), then times back-to-back predictions at each batch size with 1 thread and with every
core, in the order: xgboost Booster.inplace_predict, GTIL on the Treelite form of the XGBoost model, lightgbm
Booster.predict, GTIL on the Treelite form of the LightGBM model, then what modelhost's FIL backend does with each
(`modelhost FIL`: XGBoost with GTIL below the crossover, LightGBM alone). Each result is the median wall time per call
over `--duration` seconds (after a short warmup), and the rows per second that gives.

    .venv/bin/python benchmarks/fil_predictors.py
    .venv/bin/python benchmarks/fil_predictors.py --trees 100,500 --batch-sizes 1,64,1024 --duration 2

Run by hand, never by the tests: numbers from the 2 shared development cores are only meaningful as ratios
between predictors measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np
import treelite
import xgboost as xgb

from modelhost.backends.fil.forest import Forest, LoadOptions, load_forest

Predict = Callable[[np.ndarray[Any, Any]], Any]


@dataclass
class Timing:
    library: str
    predictor: str
    trees: int
    batch_size: int
    threads: int
    calls: int
    median_us: float
    rows_per_s: float


def _train_data(features: int, rows: int = 4096) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, features)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] * x[:, 2] - x[:, 3] > 0).astype(np.int32)
    return x, y


def _xgboost_model(trees: int, depth: int, features: int) -> xgb.Booster:
    x, y = _train_data(features)
    params = {"objective": "binary:logistic", "max_depth": depth, "eta": 0.1, "nthread": os.cpu_count() or 1}
    return xgb.train(params, xgb.DMatrix(x, y), num_boost_round=trees)


def _lightgbm_model(trees: int, depth: int, features: int) -> lgb.Booster:
    x, y = _train_data(features)
    params = {
        "objective": "binary",
        "max_depth": depth,
        "num_leaves": 2**depth,
        "learning_rate": 0.1,
        "verbose": -1,
        "min_data_in_leaf": 5,
    }
    return lgb.train(params, lgb.Dataset(x, y), num_boost_round=trees)


def _time(predict: Predict, rows: np.ndarray[Any, Any], duration: float) -> tuple[int, float]:
    """(calls, median seconds per call) of back-to-back predictions for `duration` seconds."""
    warm_until = time.perf_counter() + min(0.3, duration / 4)
    while time.perf_counter() < warm_until:
        predict(rows)
    samples: list[float] = []
    end = time.perf_counter() + duration
    while time.perf_counter() < end:
        start = time.perf_counter()
        predict(rows)
        samples.append(time.perf_counter() - start)
    return len(samples), statistics.median(samples)


def _modelhost(xgb_model: xgb.Booster, lgb_model: lgb.Booster, threads: int) -> tuple[Forest, Forest]:
    """The two models as modelhost's FIL backend loads them (from files, as a model repository holds them)."""
    with tempfile.TemporaryDirectory() as tmp:
        xgb_path, lgb_path = Path(tmp) / "xgboost.json", Path(tmp) / "model.txt"
        xgb_model.save_model(xgb_path)
        lgb_model.save_model(lgb_path)
        return (
            load_forest(xgb_path, LoadOptions("bench", "xgboost_json", threads=threads)),
            load_forest(lgb_path, LoadOptions("bench", "lightgbm", threads=threads)),
        )


def _predictors(
    xgb_model: xgb.Booster, lgb_model: lgb.Booster, threads: int
) -> list[tuple[str, str, Predict]]:
    xgb_model.set_param({"nthread": threads})
    xgb_tl = treelite.frontend.from_xgboost(xgb_model)
    lgb_tl = treelite.frontend.from_lightgbm(lgb_model)
    xgb_fil, lgb_fil = _modelhost(xgb_model, lgb_model, threads)
    return [
        (
            "xgboost",
            "Booster.inplace_predict",
            lambda x: xgb_model.inplace_predict(x, validate_features=False),
        ),
        ("xgboost", "treelite.gtil.predict", lambda x: treelite.gtil.predict(xgb_tl, x, nthread=threads)),
        ("xgboost", "modelhost FIL", xgb_fil.scores),
        ("lightgbm", "Booster.predict", lambda x: lgb_model.predict(x, num_threads=threads)),
        ("lightgbm", "treelite.gtil.predict", lambda x: treelite.gtil.predict(lgb_tl, x, nthread=threads)),
        ("lightgbm", "modelhost FIL", lgb_fil.scores),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trees", default="100,500", help="comma-separated tree counts")
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--batch-sizes", default="1,64,1024")
    parser.add_argument("--threads", default=f"1,{os.cpu_count() or 1}", help="comma-separated thread counts")
    parser.add_argument("--duration", type=float, default=1.5, help="seconds per measurement")
    parser.add_argument("--json", default="", help="also write the results to this file")
    args = parser.parse_args()

    x, _ = _train_data(args.features, rows=8192)
    results: list[Timing] = []
    print(
        f"{'library':9} {'predictor':24} {'trees':>5} {'batch':>5} {'thr':>3} {'median us':>10} {'rows/s':>12}"
    )
    for trees in (int(t) for t in args.trees.split(",")):
        xgb_model = _xgboost_model(trees, args.depth, args.features)
        lgb_model = _lightgbm_model(trees, args.depth, args.features)
        for threads in sorted({int(t) for t in args.threads.split(",")}):
            for library, predictor, predict in _predictors(xgb_model, lgb_model, threads):
                for batch in (int(b) for b in args.batch_sizes.split(",")):
                    rows = np.ascontiguousarray(x[:batch])
                    calls, seconds = _time(predict, rows, args.duration)
                    timing = Timing(
                        library, predictor, trees, batch, threads, calls, seconds * 1e6, batch / seconds
                    )
                    results.append(timing)
                    print(
                        f"{library:9} {predictor:24} {trees:>5} {batch:>5} {threads:>3} "
                        f"{timing.median_us:>10.1f} {timing.rows_per_s:>12.0f}",
                        flush=True,
                    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump([asdict(r) for r in results], out, indent=1)


if __name__ == "__main__":
    main()
