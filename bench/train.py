"""SFT throughput: padding-free packing against padded batches on the same episodes, in the same run.

Each configuration trains in its own process (so its peak memory is its own) on the same teacher episodes of
mixed length, with the same number of sequences per optimizer step, and prints non-padding tokens per second,
the ratio packed / padded and each one's peak resident memory. With `--zero2`, a 2-process DeepSpeed ZeRO-2 run
of the packed configuration is compared with 1 process.

    python bench/train.py [--model SmolLM2-135M-Instruct] [--episodes 48] [--steps 6] [--zero2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _rows(model: str, episodes_dir: Path, n: int, max_length: int) -> list[dict]:
    from components.policies.tokens import ChatTokens
    from components.rollout.store import load_episodes_dir
    from components.training.data import sft_examples
    from components.training.models import load_tokenizer

    chat = ChatTokens(load_tokenizer(model))
    rows = [vars(r) for r in sft_examples(load_episodes_dir(episodes_dir).episodes, chat, max_tokens=max_length)]
    return rows[:n]


def child(spec: dict) -> None:
    """Train one configuration; print its figures as one JSON line."""
    from components.training.config import LoraSettings, Schedule, SFTSettings
    from components.training.trainers import TrainJob, train

    rows = json.loads(Path(spec["rows"]).read_text())
    schedule = Schedule(max_steps=spec["steps"], batch_size=spec["batch"], max_length=spec["max_length"],
                        logging_steps=1, save_steps=10_000, warmup_ratio=0.0)
    job = TrainJob(method="sft", base_model=spec["model"], dataset_dir=Path(spec["rows"]), out_dir=Path(spec["out"]),
                   sft=SFTSettings(packing=spec["packing"], schedule=schedule, lora=LoraSettings()))
    result = train(job, rows=rows)
    # the first step includes one-off work (allocations, thread pools): time the steady ones from the log
    logs = [e for e in result.log_history if "num_input_tokens_seen" in e and "train_runtime" in e and "loss" in e]
    if len(logs) >= 2:
        first, last = logs[0], logs[-1]
        tps = (last["num_input_tokens_seen"] - first["num_input_tokens_seen"]) / (float(last["train_runtime"])
                                                                                   - float(first["train_runtime"]))
    else:
        tps = result.tokens_per_s
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps({"tokens_per_s": tps, "tokens": result.tokens, "steps": result.global_step,
                                  "peak_mb": peak_mb, "processes": result.processes}), flush=True)


def _run(spec: dict, processes: int = 1, zero2: bool = False) -> dict:
    if not zero2:
        cmd = [sys.executable, __file__, "--child", json.dumps(spec)]
        env = dict(os.environ)
    else:
        from components.training.stage import DEEPSPEED_DIR, launch_env

        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(DEEPSPEED_DIR / "accelerate" / "zero2.yaml"), "--num_processes", str(processes), __file__,
               "--child", json.dumps(spec)]
        env = {**os.environ, **launch_env(processes)}
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        sys.stderr.write(out.stdout[-3000:] + out.stderr[-3000:])
        raise SystemExit(f"configuration failed: {spec}")
    return json.loads(lines[0].removeprefix("RESULT "))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--model", default="SmolLM2-135M-Instruct")
    ap.add_argument("--episodes-dir", default="data/rollouts/demo/teacher")
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=4, help="episodes per padded batch")
    ap.add_argument("--max-length", type=int, default=4096, help="tokens per packed row")
    ap.add_argument("--zero2", action="store_true")
    ap.add_argument("--zero2-max-length", type=int, default=2048)
    args = ap.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    rows = _rows(args.model, ROOT / args.episodes_dir, args.episodes, args.max_length)
    lengths = sorted(len(r["input_ids"]) for r in rows)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.json"
        path.write_text(json.dumps(rows))
        mean = sum(lengths) / len(lengths)
        # same tokens per step: a packed row of max_length holds about max_length / mean episodes
        packed_rows = max(1, round(args.batch * mean / args.max_length))
        base = {"rows": str(path), "model": args.model, "steps": args.steps, "max_length": args.max_length}
        padded = _run({**base, "packing": False, "batch": args.batch, "out": f"{tmp}/padded"})
        packed = _run({**base, "packing": True, "batch": packed_rows, "out": f"{tmp}/packed"})
        print(f"episodes: {len(rows)}, lengths {lengths[0]}..{lengths[-1]} (mean {mean:.0f}); {args.steps} steps; "
              f"padded: {args.batch} episodes/step; packed: {packed_rows} row(s) of {args.max_length} tokens/step")
        print(f"{'config':<22}{'tokens/s':>10}{'peak MB':>10}")
        print(f"{'padded':<22}{padded['tokens_per_s']:>10.1f}{padded['peak_mb']:>10.0f}")
        print(f"{'packed (padding-free)':<22}{packed['tokens_per_s']:>10.1f}{packed['peak_mb']:>10.0f}")
        print(f"packed / padded: {packed['tokens_per_s'] / padded['tokens_per_s']:.2f}x")
        if args.zero2:
            # both through the same accelerate + DeepSpeed ZeRO-2 launch; shorter rows keep two ranks' memory in RAM
            z = {**base, "packing": True, "batch": 1, "max_length": args.zero2_max_length}
            one = _run({**z, "out": f"{tmp}/z1"}, processes=1, zero2=True)
            two = _run({**z, "out": f"{tmp}/z2"}, processes=2, zero2=True)
            print(f"ZeRO-2 2 processes: {two['tokens_per_s']:.1f} tokens/s vs 1 process {one['tokens_per_s']:.1f} "
                  f"({two['tokens_per_s'] / one['tokens_per_s']:.2f}x; tokens of all ranks)")


if __name__ == "__main__":
    main()
