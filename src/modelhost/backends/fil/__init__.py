"""Triton's FIL backend (`backend: "fil"`): tree models from XGBoost, LightGBM and Treelite checkpoints, on CPU.

Modules: `settings` reads the config's parameters, `forest` loads a model file (one module per library:
`xgboost_forest`, `lightgbm_forest`, `treelite_forest`), `answers` turns the model's scores into FIL's outputs,
`io_check` refuses a config that contradicts the model, `autocomplete` fills a config from the model file, and
`backend` ties them together. Only the `*_forest` modules import a framework.
"""
