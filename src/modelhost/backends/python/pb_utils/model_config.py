"""The model configuration as a python model sees it: the ModelConfig given to `auto_complete_config`, and the
helpers that read Triton's JSON form of the config."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class ModelConfig:
    """The configuration given to `auto_complete_config`, which may change max_batch_size, the scheduler,
    inputs, outputs and the transaction policy. Built from Triton's JSON (a str, as Triton does) or a dict."""

    def __init__(self, model_config: str | dict[str, Any]) -> None:
        self._model_config: dict[str, Any] = (
            json.loads(model_config) if isinstance(model_config, str) else model_config
        )

    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        configured = self._model_config.get("max_batch_size", 0)
        if configured > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {configured}, but in auto-complete-config function for "
                f"model '{self._name()}' specified max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{scheduler}', but auto-complete-config "
                    f"function for model '{self._name()}' tries to set scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:
        self._add_tensor("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict[str, Any]) -> None:
        self._add_tensor("output", output, ("name", "data_type", "dims"))

    def _add_tensor(self, kind: str, tensor: dict[str, Any], valid: tuple[str, ...]) -> None:
        model = self._name()
        for key in tensor:
            if key not in valid:
                allowed = ", ".join(f"'{v}'" for v in valid[:-1]) + f" and '{valid[-1]}'"
                raise ValueError(
                    f"{kind} '{tensor.get('name', '')}' in auto-complete-config function for model '{model}' "
                    f"contains property other than {allowed}."
                )
        if "name" not in tensor:
            raise ValueError(
                f"{kind} in auto-complete-config function for model '{model}' is missing 'name' property."
            )
        for required in ("data_type", "dims"):
            if required not in tensor:
                raise ValueError(
                    f"{kind} '{tensor['name']}' in auto-complete-config function for model '{model}' is missing "
                    f"'{required}' property."
                )
        existing_tensors: list[dict[str, Any]] = self._model_config.setdefault(kind, [])
        for existing in existing_tensors:
            if existing["name"] != tensor["name"]:
                continue
            # The same name again: it must agree with what the configuration says; it fills in what is unset.
            configured_type = existing.get("data_type", "TYPE_INVALID")
            if configured_type != "TYPE_INVALID" and configured_type != tensor["data_type"]:
                raise ValueError(
                    f"unable to load model '{model}', configuration expects datatype {configured_type} for {kind} "
                    f"'{tensor['name']}', model provides {tensor['data_type']}"
                )
            if existing.get("dims") and existing["dims"] != tensor["dims"]:
                raise ValueError(
                    f"model '{model}', tensor '{tensor['name']}': the model expects dims {tensor['dims']} but the "
                    f"model configuration specifies dims {existing['dims']}"
                )
            if "optional" in existing and "optional" in tensor and existing["optional"] != tensor["optional"]:
                raise ValueError(
                    f"model '{model}', tensor '{tensor['name']}': the model expects optional {tensor['optional']} "
                    f"but the model configuration specifies optional {existing['optional']}"
                )
            existing["data_type"] = tensor["data_type"]
            existing["dims"] = tensor["dims"]
            if "optional" in tensor:
                existing["optional"] = tensor["optional"]
            return
        existing_tensors.append(tensor)

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        model = self._name()
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    f"model transaction property in auto-complete-config function for model '{model}' contains "
                    "property other than 'decoupled'."
                )
        policy: dict[str, Any] = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            if "decoupled" in policy and policy["decoupled"] != transaction_policy_dict["decoupled"]:
                raise ValueError(
                    f"trying to change decoupled property in auto-complete-config for model '{model}', which is "
                    f"already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = transaction_policy_dict["decoupled"]


def get_input_config_by_name(model_config: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    for properties in model_config.get("input", ()):
        if properties["name"] == name:
            return properties  # type: ignore[no-any-return]
    return None


def get_output_config_by_name(model_config: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    for properties in model_config.get("output", ()):
        if properties["name"] == name:
            return properties  # type: ignore[no-any-return]
    return None


def using_decoupled_model_transaction_policy(model_config: Mapping[str, Any]) -> bool:
    policy = model_config.get("model_transaction_policy")
    if policy is None:
        return False
    return bool(policy.get("decoupled", False))
