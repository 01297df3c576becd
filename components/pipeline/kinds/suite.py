"""The suite: the tasks every later stage plays, generated and confirmed in the sandbox, or the MedAgentGym release
imported (`data.source`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from components.pipeline.kinds import StageKind, stage_kind
from components.pipeline.plan import SUITE, Plan, Stage


@stage_kind
class Suite(StageKind):
    name, rank, runner = "suite", 10, "flows.pipeline.run_suite"
    keeps_engine = True
    entries = ("components.tasks.suite", "components.tasks.importers.medagentgym", "components.tasks.validation",
               "components.tasks.record", "components.sandbox.factory", "components.sandbox.protocol",
               "components.sandbox.warm", "components.envs.solvability")
    # the sandbox confirms each reference answer (a task whose code fails there is dropped) and runs the solvability
    # check: its backend and limits decide the suite like `data` does
    sections = ("data", "sandbox")

    def stages(self, plan: Plan) -> list[Stage]:
        return [Stage(SUITE, self.name, outputs=(plan.cfg.data.out_dir,))]

    def data(self, plan: Plan, stage: Stage) -> tuple[Path, ...]:
        data = plan.cfg.data
        return (data.import_from,) if data.source == "medagentgym" and data.import_from is not None else ()

    def dvc_deps(self, plan: Plan, stage: Stage) -> tuple[Path, ...]:
        return self.data(plan, stage)  # the release folder: a new drop of tasks makes the suite stale in DVC too

    def details(self, plan: Plan, stage: Stage, tasks: Counter[tuple[str, str]] | None) -> dict[str, Any]:
        data = plan.cfg.data
        size = data.suites[data.suite]
        src = (f"import {data.import_from}" if data.source == "medagentgym"
               else f"generate {data.suite} suite ({size.train_per_category} train + {size.test_per_category} test"
                    + (f" + {size.valid_per_category} valid" if size.valid_per_category else "") + " per category)")
        return {"what": src, "out": str(data.out_dir)}
