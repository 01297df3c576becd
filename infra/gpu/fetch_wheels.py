"""`make gpu-wheels`: the wheels the GPU smoke (infra/gpu/smoke.sh) installs offline, into infra/gpu/wheels/.

The set is the dependency closure of the training libraries the smoke imports, at the versions this project's .venv
holds (the pins the test suite runs against), less what the GPU machine's Python must bring (LEAVE), downloaded
one by one without their dependencies for this machine's platform and Python (3.11, x86_64 Linux), and
SmolLM2's tokenizer files (the smoke's model is random; its tokenizer is the embedded model's). Fails when the folder
would exceed 64 MiB, the most that travels beside the repository.
"""

from __future__ import annotations

import importlib.metadata as md
import shutil
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "infra" / "gpu" / "wheels"
ROOTS = ("transformers", "trl", "peft", "accelerate", "deepspeed", "datasets")
# brought by the GPU machine's Python (nvidia-* likewise): torch and CUDA are gigabytes, and numpy, pandas and pyarrow
# (about 70 MiB together, pyarrow alone 40) come with any Python set up for ML; the smoke names them when missing
LEAVE = ("torch", "triton", "numpy", "pandas", "pyarrow")
LIMIT = 64 * 2**20
TOKENIZER = ROOT / ".state" / "models" / "SmolLM2-135M-Instruct"


def closure(roots: tuple[str, ...]) -> dict[str, str]:
    """name -> installed version of every distribution the roots need (their markers evaluated here)."""
    seen: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen or name in LEAVE or name.startswith("nvidia-"):
            continue
        dist = md.distribution(name)
        seen[name] = dist.version
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def main() -> None:
    pins = closure(ROOTS)
    OUT.mkdir(parents=True, exist_ok=True)
    # deepspeed comes as a source distribution: installing it offline needs setuptools and wheel beside it
    build = ["setuptools", "wheel"]
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", str(OUT), *build,
                    *(f"{n}=={v}" for n, v in sorted(pins.items()))], check=True)
    tok = OUT / "tokenizer"
    tok.mkdir(exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"):
        if (TOKENIZER / name).is_file():
            shutil.copy2(TOKENIZER / name, tok / name)
    if not (tok / "tokenizer.json").is_file():
        raise SystemExit(f"error: no tokenizer in {TOKENIZER}: run `make setup` first")
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"{OUT}: {len(pins)} distributions and the tokenizer, {size / 2**20:.1f} MiB")
    if size > LIMIT:
        raise SystemExit(f"error: {OUT} is {size / 2**20:.1f} MiB, over the 64 MiB that travel with the repository")


if __name__ == "__main__":
    main()
