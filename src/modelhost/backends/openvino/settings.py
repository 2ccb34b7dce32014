"""The model's `parameters` the openvino backend reads, and the compile properties they give.

Spelling and values follow Triton's openvino backend (openvino.cc ParseParameters): PERFORMANCE_HINT
(LATENCY / THROUGHPUT / CUMULATIVE_THROUGHPUT), NUM_STREAMS (AUTO / NUMA / a number), INFERENCE_NUM_THREADS and
COMPILATION_NUM_THREADS (numbers >= 0), HINT_BF16 (YES), CPU_EXTENSION_PATH, SKIP_OV_DYNAMIC_BATCHSIZE,
ENABLE_BATCH_PADDING and RESHAPE_IO_LAYERS (YES), TARGET_DEVICE (CPU by default). Values are read without case.
Where Triton silently takes any other value of a YES parameter as "no", we take yes/true/on/1 and no/false/off/0
and refuse anything else, naming the parameter.

Additions of ours, each refused by Triton's backend or absent from it: HINT_BF16 "NO" (f32, which is also what
an unset HINT_BF16 gives here, see `compile_properties`), and ENABLE_CPU_PINNING (YES / NO, default NO on CPU).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from modelhost.backends.cpu_threads import default_intra_op_threads
from modelhost.backends.params import bool_param, choice_param, int_param, param
from modelhost.errors import ModelConfigError

log = logging.getLogger(__name__)

PERFORMANCE_HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")


@dataclass(frozen=True, slots=True)
class OpenVINOSettings:
    target_device: str = "CPU"
    performance_hint: str | None = None
    num_streams: str | None = None  # "AUTO", "NUMA" or a count
    inference_threads: int | None = None
    compilation_threads: int | None = None
    bf16: bool | None = None  # True: bf16 inference precision; False: f32; None: the device's default
    cpu_pinning: bool | None = None
    cpu_extension: str | None = None
    skip_dynamic_batch: bool = False
    batch_padding: bool = False
    reshape_io: bool = False


def _text(config: Any, key: str) -> str | None:
    raw = param(config, key)
    return raw.strip() if raw is not None and raw.strip() else None


def _optional_bool(config: Any, key: str) -> bool | None:
    return None if _text(config, key) is None else bool_param(config, key, False)


def _num_streams(config: Any) -> str | None:
    raw = _text(config, "NUM_STREAMS")
    if raw is None:
        return None
    if raw.upper() in ("AUTO", "NUMA"):
        return raw.upper()
    if raw.isdigit():
        return str(int(raw))
    raise ModelConfigError(
        f"model '{config.name}': parameter 'NUM_STREAMS' must be AUTO, NUMA or a number of streams, got '{raw}'"
    )


def read_settings(config: Any) -> OpenVINOSettings:
    """The backend's parameters of `config`; ModelConfigError naming the first bad one."""
    hint = _text(config, "PERFORMANCE_HINT")
    target = _text(config, "TARGET_DEVICE")
    return OpenVINOSettings(
        target_device=target.upper() if target else "CPU",
        performance_hint=choice_param(config, "PERFORMANCE_HINT", PERFORMANCE_HINTS, "") if hint else None,
        num_streams=_num_streams(config),
        inference_threads=int_param(config, "INFERENCE_NUM_THREADS"),
        compilation_threads=int_param(config, "COMPILATION_NUM_THREADS"),
        bf16=_optional_bool(config, "HINT_BF16"),
        cpu_pinning=_optional_bool(config, "ENABLE_CPU_PINNING"),
        cpu_extension=_text(config, "CPU_EXTENSION_PATH"),
        skip_dynamic_batch=bool_param(config, "SKIP_OV_DYNAMIC_BATCHSIZE", False),
        batch_padding=bool_param(config, "ENABLE_BATCH_PADDING", False),
        reshape_io=bool_param(config, "RESHAPE_IO_LAYERS", False),
    )


def compile_properties(
    settings: OpenVINOSettings, model_name: str, total_instances: int, supported: Collection[str] | None
) -> dict[str, str]:
    """The properties the model is compiled with, for a compiled model that the model's `total_instances`
    instances share (one infer request each).

    What the config sets is passed as is (the device refuses what it does not take, and the load fails with its
    reason). What it leaves out we choose where the device says it takes it (`supported`; None: it does not say,
    and we choose nothing):
    - NUM_STREAMS: one stream per instance, unless the config sets NUM_STREAMS or PERFORMANCE_HINT (then OpenVINO
      derives it), so that the instances run side by side, as `count: N` with NUM_STREAMS N does in Triton;
    - INFERENCE_NUM_THREADS: the CPU budget the other backends use (backends/cpu_threads.py), per instance, so a
      model's streams share the cores but one instead of each taking them all;
    - INFERENCE_PRECISION_HINT: f32 unless HINT_BF16 is YES. Left to itself, OpenVINO's CPU plugin computes in
      bf16 on CPUs that have it (AVX512-BF16, AMX), so a model's answers would change by ~1e-2 relative with the
      CPU generation the server lands on; HINT_BF16 YES asks for bf16, as its name says;
    - ENABLE_CPU_PINNING: off. OpenVINO pins each compiled model's streams to the first cores, so two models (or
      a model and a request-decoding thread) pinned to the same core take turns while another core idles
      (measured on 2 cores: two 1-thread models ran at half speed each, pinned, and 1.4x the pair's throughput
      unpinned).
    """
    known = None if supported is None else set(supported)

    def takes(key: str) -> bool:
        return known is not None and key in known

    properties: dict[str, str] = {}
    if settings.performance_hint is not None:
        properties["PERFORMANCE_HINT"] = settings.performance_hint
    if settings.num_streams is not None:
        properties["NUM_STREAMS"] = settings.num_streams
    elif settings.performance_hint is None and takes("NUM_STREAMS"):
        properties["NUM_STREAMS"] = str(max(1, total_instances))
    if settings.inference_threads is not None:
        properties["INFERENCE_NUM_THREADS"] = str(settings.inference_threads)
    elif takes("INFERENCE_NUM_THREADS"):
        per_instance = default_intra_op_threads(total_instances)
        properties["INFERENCE_NUM_THREADS"] = str(per_instance * max(1, total_instances))
    if settings.compilation_threads is not None:
        if known is None or "COMPILATION_NUM_THREADS" in known:
            properties["COMPILATION_NUM_THREADS"] = str(settings.compilation_threads)
        else:
            # It only bounds the load's own threads; refusing it would refuse configs Triton served. (The CPU
            # plugin of OpenVINO 2026 no longer takes it.)
            log.warning(
                "model '%s': OpenVINO device %s does not take COMPILATION_NUM_THREADS; parameter ignored",
                model_name,
                settings.target_device,
            )
    if settings.bf16 is not None:
        properties["INFERENCE_PRECISION_HINT"] = "bf16" if settings.bf16 else "f32"
    elif takes("INFERENCE_PRECISION_HINT"):
        properties["INFERENCE_PRECISION_HINT"] = "f32"
    if settings.cpu_pinning is not None:
        properties["ENABLE_CPU_PINNING"] = "YES" if settings.cpu_pinning else "NO"
    elif takes("ENABLE_CPU_PINNING"):
        properties["ENABLE_CPU_PINNING"] = "NO"
    return properties


__all__ = ["PERFORMANCE_HINTS", "OpenVINOSettings", "compile_properties", "read_settings"]
