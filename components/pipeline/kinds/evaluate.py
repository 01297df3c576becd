"""Evaluation: the leaderboard of every held-out test rollout against the baseline, ranked by the verifier where one
is trained, and the valid rollouts on a board of their own."""

from __future__ import annotations

from collections import Counter
from typing import Any

from components.pipeline.kinds import StageKind, stage_kind
from components.pipeline.plan import EVALUATE, Plan, Stage


@stage_kind
class Evaluate(StageKind):
    name, rank, runner, last = "evaluate", 80, "flows.pipeline.run_evaluate", True
    entries = ("components.evaluation.leaderboard", "components.evaluation.plots", "components.evaluation.report",
               "components.training.verifier", "components.training.stage", "components.pipeline.paths")
    metrics, plots = True, ("success.png", "success_by_domain.png", "taxonomy.png")

    def stages(self, plan: Plan) -> list[Stage]:
        cfg, explicit = plan.cfg, plan.cfg.pipeline.stages
        tests = plan.test_rollouts()
        if not ((explicit is None and tests) or EVALUATE in (explicit or ())):
            return []
        # the verifier, where one is trained, ranks each rollout's episodes (best@k) and is scored (AUC) there
        scorer = ("verifier",) if "verifier" in plan.names else ()
        return [Stage(EVALUATE, self.name, (*tests, *plan.valid_rollouts(), *scorer),
                      outputs=(cfg.pipeline.reports_dir / cfg.profile / "leaderboard",))]

    def inputs(self, plan: Plan, stage: Stage) -> dict[str, Any]:
        # which model each is paired with is the plan's to say (Plan.parents), not the profile section's: hashed here
        return {"rollouts": list(stage.needs), "baseline": plan.baseline(),
                "parents": plan.parents([*plan.evaluated(), *plan.valid_rollouts()])}

    def series(self, plan: Plan, stage: Stage) -> dict[str, dict[str, Any]]:
        board = stage.outputs[0]
        return {"success": {"template": "bar_horizontal_sorted", "x": "success", "title": "greedy pass@1, held-out",
                            "y": {str(board / "success.json"): "rollout"}}}

    def params(self, plan: Plan, stage: Stage) -> list[str]:
        return ["pipeline.baseline"]

    def details(self, plan: Plan, stage: Stage, tasks: Counter[tuple[str, str]] | None) -> dict[str, Any]:
        scorer = " ranked by the verifier" if "verifier" in stage.needs else ""
        valid = f"; {', '.join(plan.valid_rollouts())} on a board of their own" if plan.valid_rollouts() else ""
        return {"what": f"leaderboard of {', '.join(plan.evaluated())} against {plan.baseline()}{scorer}{valid}"}
