"""`--allow-gpu-metrics`: Triton's GPU gauges through NVML, every --metrics-interval-ms, label `gpu_uuid`.

    nv_gpu_utilization          0..1 (nvmlDeviceGetUtilizationRates)
    nv_gpu_memory_total_bytes   nv_gpu_memory_used_bytes (nvmlDeviceGetMemoryInfo)
    nv_gpu_power_usage          W (nvmlDeviceGetPowerUsage)
    nv_gpu_power_limit          W (nvmlDeviceGetPowerManagementLimit)
    nv_energy_consumption       J since the server started (counter; nvmlDeviceGetTotalEnergyConsumption)

Triton reads these through DCGM; modelhost reads them through NVML, from the optional `nvidia-ml-py`
package (module `pynvml`), which is not a dependency. Without it, or without a GPU, the flag is accepted and
there are no GPU families (one info line at startup). CUDA_VISIBLE_DEVICES narrows the GPUs reported, as
it narrows those Triton sees. A reading NVML cannot give (power on some boards) leaves that family's
series out for that GPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("modelhost")

GPU_FAMILIES = [
    "nv_gpu_utilization",
    "nv_gpu_memory_total_bytes",
    "nv_gpu_memory_used_bytes",
    "nv_gpu_power_usage",
    "nv_gpu_power_limit",
    "nv_energy_consumption",
]
_HELP = {
    "nv_gpu_utilization": ("gauge", "GPU utilization rate [0.0 - 1.0)"),
    "nv_gpu_memory_total_bytes": ("gauge", "GPU total memory, in bytes"),
    "nv_gpu_memory_used_bytes": ("gauge", "GPU used memory, in bytes"),
    "nv_gpu_power_usage": ("gauge", "GPU power usage in watts"),
    "nv_gpu_power_limit": ("gauge", "GPU power management limit in watts"),
    "nv_energy_consumption": ("counter", "GPU energy consumption in joules since the Triton Server started"),
}


@dataclass
class _Gpu:
    uuid: str
    handle: Any
    energy_start_mj: int | None = None
    values: dict[str, float] = field(default_factory=dict)


class GpuMetrics:
    def __init__(self, nvml: Any, gpus: list[_Gpu]) -> None:
        self._nvml = nvml
        self.gpus = gpus

    def poll(self) -> None:
        """Blocking NVML calls: run it off the event loop."""
        nvml = self._nvml
        for gpu in self.gpus:
            values: dict[str, float] = {}
            with contextlib.suppress(Exception):
                values["nv_gpu_utilization"] = nvml.nvmlDeviceGetUtilizationRates(gpu.handle).gpu / 100.0
            with contextlib.suppress(Exception):
                memory = nvml.nvmlDeviceGetMemoryInfo(gpu.handle)
                values["nv_gpu_memory_total_bytes"] = memory.total
                values["nv_gpu_memory_used_bytes"] = memory.used
            with contextlib.suppress(Exception):
                values["nv_gpu_power_usage"] = nvml.nvmlDeviceGetPowerUsage(gpu.handle) / 1000.0
            with contextlib.suppress(Exception):
                values["nv_gpu_power_limit"] = nvml.nvmlDeviceGetPowerManagementLimit(gpu.handle) / 1000.0
            with contextlib.suppress(Exception):
                energy = nvml.nvmlDeviceGetTotalEnergyConsumption(gpu.handle)  # mJ since the driver loaded
                if gpu.energy_start_mj is None:
                    gpu.energy_start_mj = energy
                values["nv_energy_consumption"] = (energy - gpu.energy_start_mj) / 1000.0
            gpu.values = values

    def render(self) -> list[str]:
        lines: list[str] = []
        for name in GPU_FAMILIES:
            kind, help_text = _HELP[name]
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            for gpu in self.gpus:
                if name in gpu.values:
                    value = gpu.values[name]
                    text = str(int(value)) if float(value).is_integer() else repr(float(value))
                    lines.append(f'{name}{{gpu_uuid="{gpu.uuid}"}} {text}')
        return lines


def _visible(count: int) -> list[int]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(range(count))
    indices = []
    for item in visible.split(","):
        item = item.strip()
        if not item.isdigit():
            break  # CUDA stops at the first entry it cannot use (UUIDs are not mapped here)
        if int(item) < count:
            indices.append(int(item))
    return indices


def start_gpu_metrics(nvml: Any = None) -> GpuMetrics | None:
    """GPU metrics through NVML, or None (logged once at info) without nvidia-ml-py, a driver or a GPU."""
    try:
        if nvml is None:
            nvml = importlib.import_module("pynvml")  # nvidia-ml-py, optional
        nvml.nvmlInit()
        gpus: list[_Gpu] = []
        for index in _visible(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = nvml.nvmlDeviceGetUUID(handle)
            gpus.append(_Gpu(uuid.decode() if isinstance(uuid, bytes) else str(uuid), handle))
    except ImportError:
        log.info("GPU metrics: not reported (the optional package nvidia-ml-py is not installed)")
        return None
    except Exception as e:  # NVMLError: no driver, no library
        log.info("GPU metrics: not reported (NVML is not available: %s)", e)
        return None
    if not gpus:
        log.info("GPU metrics: not reported (no GPU)")
        return None
    metrics = GpuMetrics(nvml, gpus)
    metrics.poll()
    log.info("GPU metrics: reported for %d GPU(s) through NVML", len(gpus))
    return metrics


async def poll_forever(metrics: GpuMetrics, interval_ms: float) -> None:
    warned = False
    while True:
        await asyncio.sleep(interval_ms / 1000)
        try:
            await asyncio.to_thread(metrics.poll)
        except Exception as e:  # an NVML error must not end the polling (the gauges keep their last values)
            if not warned:
                log.warning("GPU metrics: polling NVML failed: %s", e)
                warned = True
