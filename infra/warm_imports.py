"""Compile, once at setup, the bytecode of what the demo's processes import.

    <venv>/bin/python infra/warm_imports.py [--require MODULE]... [MODULE ...]
        # default: what the project's processes import; a --require'd module that does not import fails (exit 1)

Every Python process the demo starts (the Prefect server, the pipeline, each training child, each vLLM engine)
imports thousands of library modules, and compiles each one it finds no bytecode for. Where
PYTHONDONTWRITEBYTECODE=1 is set (as on this machine) nothing compiled is ever kept, so each process start compiles
them all again: a training child spent about 7 s of one core importing, a vLLM engine about 10. Python reads
bytecode it finds even there; it only never writes any. So this imports the modules named, then writes the
bytecode of every module of the environment (under sys.prefix) that the imports loaded. Packages are installed
without bytecode (infra/install_packages.py): compiling all 53k modules of the two environments costs more than the
few thousand a run imports. `make setup` runs this beside the embedded model's conversion, which keeps one core
busy; infra/vllm/setup.sh runs it in vLLM's environment with the engine's modules.
"""

from __future__ import annotations

import importlib
import importlib.util
import py_compile
import sys
import time
from pathlib import Path

MODULES = (
    "flows.cli", "flows.pipeline",  # the pipeline process: Prefect's client, MLflow, the components
    "prefect.server.api.server", "prefect.cli.server",  # `prefect server start`, the run's temporary server
    # each training child (TRL imports its trainers lazily: named here; accelerate brings DeepSpeed where installed)
    "components.training.trainers", "trl.trainer.sft_trainer", "trl.trainer.dpo_trainer", "peft.tuners.lora",
    "transformers.models.llama.modeling_llama", "accelerate.utils.deepspeed", "datasets",
    "mlflow.transformers", "mlflow.store.tracking.sqlalchemy_store",
)


def compile_loaded(prefix: Path) -> tuple[int, int]:
    """Write the missing bytecode of every loaded module under `prefix`: (written, already there)."""
    written = present = 0
    for module in list(sys.modules.values()):
        source = getattr(module, "__file__", None)
        if not source or not source.endswith(".py") or not Path(source).is_relative_to(prefix):
            continue
        cached = importlib.util.cache_from_source(source)
        if Path(cached).is_file():
            present += 1
            continue
        # py_compile writes whatever sys.dont_write_bytecode says: it is what the flag keeps imports from doing
        if py_compile.compile(source, cfile=cached, doraise=False, quiet=2):
            written += 1
    return written, present


def main(argv: list[str]) -> int:
    started = time.perf_counter()
    required = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--require"]
    optional = [a for i, a in enumerate(argv) if a != "--require" and (i == 0 or argv[i - 1] != "--require")]
    names = [*required, *optional] or list(MODULES)
    failed: dict[str, str] = {}
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 (a module that does not import here costs its compile later, no more)
            failed[name] = f"{type(exc).__name__}: {exc}"
    written, present = compile_loaded(Path(sys.prefix).resolve())
    print(f"[warm imports] {len(names) - len(failed)} of {len(names)} imported, bytecode written for {written} "
          f"modules ({present} had it) in {time.perf_counter() - started:.1f} s"
          + (f"; not imported: {'; '.join(f'{k}: {v}' for k, v in failed.items())}" if failed else ""),
          file=sys.stderr)
    return 1 if any(name in failed for name in required) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
