"""Registration: the chosen trained policy into the MLflow Model Registry, promoted only where the paired test
supports it (components/registry/). It writes no files, so DVC has nothing of it to version."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from components.pipeline.kinds import StageKind, stage_kind
from components.pipeline.paths import merged_dir
from components.pipeline.plan import EVALUATE, REGISTER, Plan, PlanError, Stage


@stage_kind
class Register(StageKind):
    name, rank, runner, last = "register", 90, "flows.pipeline.run_register", True
    entries = ("components.registry", "components.training.datasets", "components.training.stage",
               "components.pipeline.paths", "components.pipeline.provenance")

    def stages(self, plan: Plan) -> list[Stage]:
        explicit = plan.cfg.pipeline.stages
        needs = _needs(plan)
        if not ((explicit is None and needs is not None) or REGISTER in (explicit or ())):
            return []
        if needs is None:
            raise PlanError(f"profile {plan.cfg.profile}: `register` needs a trained policy and a held-out rollout "
                            "that plays its merged model")
        return [Stage(REGISTER, self.name, (EVALUATE, *needs))]

    def inputs(self, plan: Plan, stage: Stage) -> dict[str, Any]:
        return {"registry": plan.cfg.registry.model_dump(mode="json"), "needs": list(stage.needs)}

    def params(self, plan: Plan, stage: Stage) -> list[str]:
        return ["registry"]

    def outs(self, plan: Plan, stage: Stage) -> tuple[Path, ...]:
        return ()

    def details(self, plan: Plan, stage: Stage, tasks: Counter[tuple[str, str]] | None) -> dict[str, Any]:
        cfg = plan.cfg
        if plan.on_valid():
            return {"what": f"register the best on valid of {', '.join(p.stage.name for p in plan.on_valid())} as "
                            f"{cfg.registry.name}"}
        final = plan.final()
        return {"what": f"register {merged_dir(cfg, final[0].method, final[0].name)} as {cfg.registry.name}"  # type: ignore[arg-type]
                if final else "nothing to register"}


def _needs(plan: Plan) -> tuple[str, ...] | None:
    """What the register stage reads besides the leaderboard: every candidate on valid, its valid and its test
    rollout (which one is registered is known only once the valid rollouts are played); without candidates, the last
    policy trained and its test rollout. None: nothing to register."""
    candidates = plan.on_valid()
    if not candidates:
        final = plan.final()
        return None if final is None else (final[0].name, final[1])
    untested = [p for p in candidates if p.test is None]
    if untested:
        p = untested[0]
        raise PlanError(f"{plan.cfg.source}: rollouts.{p.valid} plays {p.stage.name}'s model on valid, and no test "
                        f"rollout plays it: a model chosen on valid is registered on its test figure (add a rollout "
                        f"with `model: {{stage: {p.stage.name}}}` and split: test)")
    return tuple(dict.fromkeys(n for p in candidates for n in (p.stage.name, p.valid, p.test)))  # type: ignore[misc]
