"""Peak memory and step time of one training stage under variants of its schedule, in the same run.

Reads a finished pipeline run's dataset for the stage (its manifest holds the settings the stage trained with) and
trains the first `--steps` optimizer steps of it once per variant, each in its own process (so its peak resident
memory is its own), from the model the stage started from. The first variant is the stage's own settings; each
line prints peak memory and seconds a step, and their ratios against that baseline.

    python bench/stage_memory.py --run /work/demo-run4 --method dpo --init models/demo/sft/merged --steps 12 \\
        --variant '{"batch_size": 1, "grad_accum": 2}' --variant '{"batch_size": 1, "grad_accum": 2, \\
        "gradient_checkpointing": true}'

A variant's `lora` object goes to the stage's LoRA settings (`{"lora": {"last_layers": 10}}`); `"head": "trl"`
scores through TRL's fused head instead of the CPU head (components/training/native_head.py), `"head": "cpu-whole"`
through the CPU head with DPO's rows run whole (each pair's prompt twice).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def child(spec: dict) -> None:
    """Train one variant; print its figures as one JSON line."""
    from components.training.config import DPOSettings, SFTSettings, VerifierSettings
    from components.training.trainers import TrainJob, train

    settings_cls = {"sft": SFTSettings, "dpo": DPOSettings, "verifier": VerifierSettings}[spec["method"]]
    recorded = json.loads((Path(spec["dataset"]) / "manifest.json").read_text())["settings"]
    settings = {k: v for k, v in recorded.items() if k in settings_cls.model_fields}
    variant = dict(spec["variant"])
    settings["lora"] = {**settings["lora"], **variant.pop("lora", {})}
    head = variant.pop("head", "cpu")
    if head != "cpu":
        from components.training import native_head

        cpu_head = native_head.use_cpu_head
        native_head.use_cpu_head = {  # the baselines: TRL's fused head as it scores on a CPU; DPO's rows whole
            "trl": lambda trainer, fields, pairs=False: False,
            "cpu-whole": lambda trainer, fields, pairs=False: cpu_head(trainer, fields),
        }[head]
    settings["schedule"] = {**settings["schedule"], **variant, "max_steps": spec["steps"], "save_steps": 10**6}
    job = TrainJob(method=spec["method"], base_model=spec["init"], dataset_dir=Path(spec["dataset"]),
                   out_dir=Path(spec["out"]), **{spec["method"]: settings_cls(**settings)})
    result = train(job)
    print("RESULT " + json.dumps({"steps": result.global_step, "s_per_step": result.runtime_s / max(result.global_step, 1),
                                  "tokens_per_s": result.tokens_per_s,
                                  "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True, help="a finished run's folder (a demo clone)")
    ap.add_argument("--profile", default="demo")
    ap.add_argument("--method", choices=["sft", "dpo", "verifier"], required=True)
    ap.add_argument("--init", required=True, help="the model the stage starts from, relative to --run or a name")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--variant", action="append", default=[], help="JSON schedule fields over the stage's own")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    dataset = args.run / "data" / "training" / args.profile / args.method
    if not (dataset / "manifest.json").is_file():
        raise SystemExit(f"{dataset}: no manifest.json (is --run a finished run of profile {args.profile}?)")
    init = args.run / args.init if (args.run / args.init).exists() else args.init
    base = None
    for variant in [{}] + [json.loads(v) for v in args.variant]:
        with tempfile.TemporaryDirectory() as out:
            spec = {"method": args.method, "dataset": str(dataset), "init": str(init), "out": out, "steps": args.steps,
                    "variant": variant}
            proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec), "--run", str(args.run),
                                   "--method", args.method, "--init", args.init], capture_output=True, text=True)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if proc.returncode or line is None:
            raise SystemExit(f"variant {variant} failed:\n{proc.stderr[-3000:]}")
        r = json.loads(line[len("RESULT "):])
        base = base or r
        print(f"{json.dumps(variant) or '{}':<70} peak {r['peak_gb']:5.2f} GB ({r['peak_gb'] / base['peak_gb']:.2f}x)  "
              f"{r['s_per_step']:5.1f} s/step ({r['s_per_step'] / base['s_per_step']:.2f}x)  "
              f"{r['tokens_per_s']:6.0f} tokens/s", flush=True)


if __name__ == "__main__":
    main()
