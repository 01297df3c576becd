"""Generation speed of the hf backend: 16 waiting episodes batched into one call, against one episode at a time;
and the vLLM engine against batched hf on the same prompts (when its environment exists).

    python -m bench.generation [--episodes 16] [--new-tokens 64] [--model SmolLM2-135M-Instruct] [--dtype bfloat16]
                               [--vllm]

Prompts are the first prompts of real demo tasks (the one agent prompt, every domain). Decoding is greedy and
capped at --new-tokens; tokens/s counts generated tokens over wall time. Ratios are against the one-at-a-time
baseline measured in the same run (this machine is noisy).
"""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from components.common.paths import PROJECT_ROOT
from components.envs.episode import Sampling
from components.envs.prompt import agent_messages
from components.policies.protocol import GenerationRequest, Policy
from components.policies.tokens import ChatTokens
from components.rollout.collect import select_tasks
from components.tasks.record import load_tasks


def first_requests(chat: ChatTokens, tasks_path: Path, n: int, new_tokens: int) -> list[GenerationRequest]:
    """The first turn of `n` held-out demo tasks (every domain), greedy and capped at `new_tokens`."""
    out = []
    for i, task in enumerate(select_tasks(load_tasks(tasks_path), "test", n)):
        msgs = agent_messages(task.prompt)
        out.append(GenerationRequest(key=f"{task.task_id}#0", messages=msgs, prompt_token_ids=chat.start(msgs),
                                     sampling=Sampling(temperature=0.0, max_new_tokens=new_tokens, seed=i)))
    return out


def _timed(policy: Policy, batches: list[list[GenerationRequest]]) -> tuple[float, int]:
    start = time.perf_counter()
    tokens = sum(len(g.token_ids or []) for batch in batches for g in policy.generate(batch))
    return time.perf_counter() - start, tokens


def main(episodes: int = 16, new_tokens: int = 64, model: str = "SmolLM2-135M-Instruct",
         tasks: Path = PROJECT_ROOT / "data" / "demo" / "tasks.jsonl", vllm: bool = False, dtype: str = "bfloat16") -> None:
    from components.policies.hf import HFConfig, HFPolicy

    hf = HFPolicy(HFConfig(model=model, dtype=dtype))
    chat = ChatTokens(hf.tokenizer)
    reqs = first_requests(chat, tasks, episodes, new_tokens)
    hf.generate(reqs[:2])  # warm-up: first-call allocations
    rows = []
    t_one, n_one = _timed(hf, [[r] for r in reqs])
    rows.append(("hf, one episode at a time (baseline)", t_one, n_one))
    t_batch, n_batch = _timed(hf, [reqs])
    rows.append((f"hf, {len(reqs)} episodes in one batch", t_batch, n_batch))
    Console().print(f"hf dtype {dtype}")
    if vllm:
        from components.policies.vllm import VLLMPolicy, VLLMPolicyConfig

        engine = VLLMPolicy(VLLMPolicyConfig(model=model))
        try:
            engine.generate(reqs[:2])
            t_v, n_v = _timed(engine, [reqs])
            rows.append((f"vllm, {len(reqs)} concurrent requests", t_v, n_v))
        finally:
            engine.close()
    base = n_one / t_one
    table = Table("setup", "tokens", "wall s", "tokens/s", "× baseline")
    for name, t, n in rows:
        table.add_row(name, str(n), f"{t:.2f}", f"{n / t:.1f}", f"{(n / t) / base:.2f}")
    Console().print(table)
    if vllm:
        Console().print(f"vllm / batched hf: {(rows[2][2] / rows[2][1]) / (n_batch / t_batch):.2f}×")


if __name__ == "__main__":
    typer.run(main)
