"""N vLLM servers behind one policy: one per GPU, or per tensor-parallel group of GPUs.

Engine i sees only its own slice of the devices (CUDA_VISIBLE_DEVICES: `tensor_parallel_size` of them, taken in
order), so eight servers at tensor parallel 1 take one GPU each instead of all starting on GPU 0. The devices are
the ones this process may use: its own CUDA_VISIBLE_DEVICES where set (what Ray gives an actor that asked for
GPUs), else 0..N*tp-1. One engine with no devices named keeps the process's view as it is. Each server picks its
own free port. The servers start at once (each start is tens of seconds of model loading) and a failed start
stops the others.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from components.policies.vllm_server import VLLMConfig, VLLMServer


def device_slices(engines: int, tensor_parallel_size: int | None, devices: list[str] | None,
                  visible: str | None = None) -> list[str | None]:
    """The CUDA_VISIBLE_DEVICES of each engine (None: leave the variable as the process has it)."""
    tp = tensor_parallel_size or 1
    if devices is None:
        if engines == 1:
            return [None]
        devices = [d for d in (visible or "").split(",") if d.strip()] or [str(i) for i in range(engines * tp)]
    if len(devices) < engines * tp:
        raise ValueError(f"{engines} engines of tensor_parallel_size {tp} need {engines * tp} devices, "
                         f"only {len(devices)} are visible: {','.join(devices)}")
    return [",".join(devices[i * tp:(i + 1) * tp]) for i in range(engines)]


def engine_configs(base: VLLMConfig, engines: int, devices: list[str] | None = None) -> list[VLLMConfig]:
    """`base` once per engine, each with its device slice; a fixed port would clash, so only one engine may have it."""
    if engines > 1 and base.port is not None:
        raise ValueError(f"port {base.port} is set, but {engines} engines need a port each: leave port unset")
    slices = device_slices(engines, base.tensor_parallel_size, devices, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return [base if s is None else base.model_copy(update={"env": {**base.env, "CUDA_VISIBLE_DEVICES": s}})
            for s in slices]


def start_all(servers: list[VLLMServer]) -> None:
    """Start every server concurrently; on any failure stop them all and raise the first error."""
    with ThreadPoolExecutor(max_workers=len(servers), thread_name_prefix="vllm-start") as pool:
        futures = [pool.submit(s.start) for s in servers]
        errors = [f.exception() for f in futures]
    failed = next((e for e in errors if e is not None), None)
    if failed is not None:
        stop_all(servers)
        raise failed


def stop_all(servers: list[VLLMServer]) -> None:
    with ThreadPoolExecutor(max_workers=max(len(servers), 1), thread_name_prefix="vllm-stop") as pool:
        list(pool.map(lambda s: s.stop(), servers))
