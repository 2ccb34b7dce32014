"""tritonserver's memory flags, mapped onto what ONNX Runtime can limit and what the server checks itself.

tritonserver sizes memory pools of its own with these flags; modelhost has no such pools, so:

    --cuda-memory-pool-byte-size=<gpu>:<bytes>   ONNX Runtime's CUDA provider option `gpu_mem_limit` for every
                                                 instance on that GPU (0, tritonserver's "no pool", sets no limit);
    --model-load-gpu-limit=<gpu>:<fraction>      once a KIND_GPU instance of any backend is created on that GPU,
                                                 the GPU's memory
                                                 in use (read through NVML) must be at most that fraction of its
                                                 total, or the instance fails to load. tritonserver checks after
                                                 creating the instance too, so that its own memory counts.

(--pinned-memory-pool-byte-size is an ignored flag: ONNX Runtime allocates its own pinned host memory, and its
Python API has no limit for it: its env allocators ignore an arena limit for pinned memory.)

On a host without a GPU none of them can have an effect; each one given is said so once at startup.
"""

from __future__ import annotations

import importlib
import logging
import os
import subprocess
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from modelhost.errors import Unavailable

log = logging.getLogger("modelhost.gpu_memory")

CUDA_POOL = "--cuda-memory-pool-byte-size"
LOAD_LIMIT = "--model-load-gpu-limit"

# (level, message) for the startup log
Note = tuple[int, str]


@dataclass(frozen=True, slots=True)
class GpuMemory:
    """The memory settings a backend applies to its GPU instances, by CUDA device id."""

    cuda_pool_bytes: dict[int, int] = field(default_factory=dict)
    load_limits: dict[int, float] = field(default_factory=dict)


def startup_notes(memory: GpuMemory, gpu_count: int) -> list[Note]:
    """What to log at startup about the memory flags given: at most one line per flag, and one per GPU named
    that is not there."""
    flags = ((CUDA_POOL, memory.cuda_pool_bytes), (LOAD_LIMIT, memory.load_limits))
    if gpu_count == 0:
        return [(logging.INFO, f"{flag} has no effect: this host has no GPU") for flag, gpus in flags if gpus]
    notes: list[Note] = []
    for flag, gpus in flags:
        notes += [
            (logging.WARNING, f"{flag} names GPU {gpu}, but {gpu_count} GPU(s) are visible: it has no effect")
            for gpu in sorted(gpus)
            if gpu >= gpu_count
        ]
    return notes


# --model-load-gpu-limit ----------------------------------------------------------------------------------------


class GpuUsage(NamedTuple):
    used: int  # bytes: total minus free, as tritonserver counts (cudaMemGetInfo)
    total: int

    @property
    def fraction(self) -> float:
        return self.used / self.total if self.total > 0 else 0.0


def check_load_limit(memory: GpuMemory, instance_name: str, device_id: int) -> None:
    """Raise Unavailable, in tritonserver's words, when the GPU's memory in use is over its --model-load-gpu-limit.
    Usage that cannot be read is logged and lets the load go on."""
    limit = memory.load_limits.get(device_id)
    if limit is None:
        return
    usage = read_gpu_memory(device_id)
    if usage is None:
        log.warning(
            "cannot read the memory usage of GPU %d (neither NVML nor nvidia-smi answered): "
            "%s is not checked for '%s'",
            device_id,
            LOAD_LIMIT,
            instance_name,
        )
        return
    # tritonserver compares bytes: used > total * limit.
    if usage.used > usage.total * limit:
        raise Unavailable(
            f"can not create model '{instance_name}': memory limit set for GPU {device_id} has exceeded, "
            f"model loading is rejected (used {usage.fraction:.2f} > limit {limit:.2f})"
        )


def read_gpu_memory(device_id: int) -> GpuUsage | None:
    """Memory in use on CUDA device `device_id`, from NVML (the nvidia-ml-py package) or else nvidia-smi."""
    target = nvml_device(device_id)
    return _read_with_nvml(target) or _read_with_nvidia_smi(target)


def nvml_device(device_id: int) -> str:
    """The NVML index or UUID of CUDA device `device_id`. CUDA numbers the devices CUDA_VISIBLE_DEVICES lists, in
    its order; NVML numbers every GPU of the host. (CUDA's default order, fastest first, can differ from NVML's
    on a host with GPUs of different models; CUDA_DEVICE_ORDER=PCI_BUS_ID makes them agree.)"""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        listed = [entry.strip() for entry in visible.split(",") if entry.strip()]
        if device_id < len(listed):
            return listed[device_id]
    return str(device_id)


def _read_with_nvml(target: str) -> GpuUsage | None:
    try:
        nvml: Any = importlib.import_module("pynvml")  # untyped, optional
    except ImportError:
        return None
    try:
        nvml.nvmlInit()
    except Exception as e:  # NVMLError: no driver, no permission
        log.debug("NVML is not usable: %s", e)
        return None
    try:
        if target.isdigit():
            handle = nvml.nvmlDeviceGetHandleByIndex(int(target))
        else:
            handle = nvml.nvmlDeviceGetHandleByUUID(target.encode())  # bytes: every version takes them
        info = nvml.nvmlDeviceGetMemoryInfo(handle)
        return GpuUsage(int(info.total) - int(info.free), int(info.total))
    except Exception as e:  # NVMLError: unknown device
        log.debug("NVML cannot read GPU %s: %s", target, e)
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception as e:  # NVMLError: nothing to do about it
            log.debug("NVML shutdown failed: %s", e)


def _read_with_nvidia_smi(target: str) -> GpuUsage | None:
    command = [
        "nvidia-smi",
        "--query-gpu=memory.total,memory.free",
        "--format=csv,noheader,nounits",
        "-i",
        target,
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        log.debug("nvidia-smi cannot be run: %s", e)
        return None
    if done.returncode != 0:
        log.debug("nvidia-smi failed for GPU %s: %s", target, done.stderr.strip())
        return None
    try:
        total_mib, free_mib = (int(value) for value in done.stdout.strip().splitlines()[0].split(","))
    except (IndexError, ValueError):
        log.debug("unexpected nvidia-smi output: %r", done.stdout)
        return None
    return GpuUsage((total_mib - free_mib) << 20, total_mib << 20)  # nvidia-smi counts MiB
