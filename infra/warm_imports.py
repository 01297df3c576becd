"""Import, once at setup, what the demo's processes import: Python writes their bytecode as it goes.

Packages are installed without bytecode (infra/install_packages.py): compiling all 53k modules of the two
environments would cost more than the run ever imports. What the run does import is compiled on first import, and
that first import lands in the demo, on the critical path of each process's start (the Prefect server, the
pipeline, the first training child). `make setup` runs this beside the embedded model's conversion, which keeps
one core busy and leaves the other free.
"""

from __future__ import annotations

import importlib
import sys
import time

MODULES = (
    "flows.cli", "flows.pipeline",  # the pipeline process: Prefect's client, MLflow, the components
    "prefect.server.api.server", "prefect.cli.server",  # `prefect server start`, the run's temporary server
    # each training child (TRL imports its trainers lazily: named here)
    "components.training.trainers", "trl.trainer.sft_trainer", "trl.trainer.dpo_trainer", "peft.tuners.lora",
    "transformers.models.llama.modeling_llama", "accelerate", "datasets",
    "mlflow.transformers", "mlflow.store.tracking.sqlalchemy_store",
)


def main() -> int:
    started = time.perf_counter()
    failed = []
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 (a module that does not import here costs its import later, no more)
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    print(f"[warm imports] {len(MODULES) - len(failed)} of {len(MODULES)} imported in "
          f"{time.perf_counter() - started:.1f} s" + (f"; not: {'; '.join(failed)}" if failed else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
