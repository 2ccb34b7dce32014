"""What it costs to move a GPU tensor across the python backend's process boundary, two ways, on a GPU:

- through host memory, as modelhost does (backends/python/gpu_tensors.py): an output copied from the device to
  the host (`tensor.cpu()`), an input given on the GPU copied from the host (`torch.tensor(array, device=...)`);
- through CUDA IPC, as Triton's python backend shares device memory: another process opens the allocation's IPC
  handle (cudaIpcOpenMemHandle), copies it on the device, and closes it (the cost a tensor would pay where
  handles are not cached; Triton caches them per pool).

Sizes from 4 KiB to 64 MiB, medians of `--repeats` timings each. Run by scripts/gpu_check.sh; by hand on a GPU:

    python benchmarks/gpu_tensor_transfer.py [--json out.json]

Needs torch with CUDA and cuda-bindings; the IPC side uses modelhost.host.cuda_runtime, the module that opens client
CUDA shared memory, so this also runs that code on a GPU.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from pathlib import Path
from typing import Any

SIZES = (4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20)


def _median_us(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1e6, 1)


def host_copies(sizes: tuple[int, ...], repeats: int) -> dict[int, dict[str, float]]:
    import numpy as np
    import torch

    results: dict[int, dict[str, float]] = {}
    for size in sizes:
        device = torch.ones(size, dtype=torch.uint8, device="cuda:0")
        host = np.ones(size, dtype=np.uint8)
        d2h, h2d = [], []
        for _ in range(repeats + 2):  # two warm-ups
            torch.cuda.synchronize()
            start = time.perf_counter()
            device.cpu().numpy()
            d2h.append(time.perf_counter() - start)
            start = time.perf_counter()
            torch.tensor(host, device="cuda:0")
            torch.cuda.synchronize()
            h2d.append(time.perf_counter() - start)
        results[size] = {"to_host_us": _median_us(d2h[2:]), "to_device_us": _median_us(h2d[2:])}
    return results


def _open_in_child(handles: dict[int, list[bytes]], answer: Any) -> None:
    """The other process: open each handle, copy its allocation on the device, close it; time each."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from modelhost.host import cuda_runtime

    rt = cuda_runtime.runtime()
    cuda_runtime.check(rt, rt.cudaSetDevice(0))
    cuda_runtime.check(rt, rt.cudaFree(0))  # the context, created before any timing
    timings: dict[int, dict[str, float]] = {}
    for size, items in handles.items():
        target = cuda_runtime.check(rt, rt.cudaMalloc(size))
        opens, totals = [], []
        for handle in items:
            start = time.perf_counter()
            address = cuda_runtime.ipc_open(handle, 0)
            opened = time.perf_counter()
            cuda_runtime.check(
                rt, rt.cudaMemcpy(target, address, size, rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice)
            )
            cuda_runtime.check(rt, rt.cudaDeviceSynchronize())  # a device-to-device copy returns at once
            cuda_runtime.ipc_close(address, 0)
            totals.append(time.perf_counter() - start)
            opens.append(opened - start)
        cuda_runtime.check(rt, rt.cudaFree(target))
        timings[size] = {"ipc_open_us": _median_us(opens), "ipc_open_copy_close_us": _median_us(totals)}
    answer.send(timings)


def ipc(sizes: tuple[int, ...], repeats: int) -> dict[int, dict[str, float]]:
    import ctypes

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from modelhost.host import cuda_runtime

    rt = cuda_runtime.runtime()
    cuda_runtime.check(rt, rt.cudaSetDevice(0))
    allocations: list[int] = []
    handles: dict[int, list[bytes]] = {}
    for size in sizes:
        handles[size] = []
        for _ in range(repeats):
            address = cuda_runtime.check(rt, rt.cudaMalloc(size))
            allocations.append(address)
            handle = cuda_runtime.check(rt, rt.cudaIpcGetMemHandle(address))
            raw = (ctypes.c_char * cuda_runtime.IPC_HANDLE_SIZE).from_address(handle.getPtr())
            handles[size].append(bytes(raw))
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_open_in_child, args=(handles, send))
    child.start()
    send.close()  # the child's end only: a child that dies closes the pipe, and recv() raises EOFError
    try:
        if not receive.poll(60):
            raise TimeoutError("the IPC side did not answer in 60 s")
        timings: dict[int, dict[str, float]] = receive.recv()
    finally:
        child.join(timeout=10)
        if child.is_alive():
            child.kill()
            child.join()
        for address in allocations:  # once no other process maps them
            cuda_runtime.check(rt, rt.cudaFree(address))
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    copies = host_copies(SIZES, args.repeats)
    opened = ipc(SIZES, args.repeats)
    rows = [{"bytes": size, **copies[size], **opened[size]} for size in SIZES]
    print("| bytes | to host (us) | to device (us) | IPC open (us) | IPC open + copy + close (us) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['bytes']:,} | {r['to_host_us']} | {r['to_device_us']} | {r['ipc_open_us']} | "
            f"{r['ipc_open_copy_close_us']} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
