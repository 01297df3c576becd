"""DiagGym's stage kinds, the plan of a profile with a `diag` section (components/profile/diag.py): cohort → world →
cold_start → grpo → evaluate → register, each reading the `diag` keys of its `sections`. Each has one stage, named as
the kind without `diag_`, and its runner in flows/diag_pipeline.py."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

from components.common.paths import PROJECT_ROOT
from components.pipeline.digest import model_folder
from components.pipeline.kinds import StageKind, stage_kind
from components.pipeline.plan import Plan, Stage
from components.profile.config import PipelineConfig
from components.profile.diag import DiagSettings


def diag_paths(cfg: PipelineConfig) -> dict[str, Path]:
    """Where each DiagGym stage writes: data, checkpoints (with their runs) and reports."""
    d = cfg.diag
    assert d is not None
    reports = cfg.pipeline.reports_dir / cfg.profile
    return {"cohort": d.out_dir, "world": d.models_dir / "world", "card": reports / "world",
            "cold_start": d.models_dir / "cold_start", "grpo": d.models_dir / "grpo",
            "evaluate": reports / "evaluation"}


class DiagKind(StageKind):
    family = "diag"
    needs: ClassVar[tuple[str, ...]] = ()  # the stages it reads
    writes: ClassVar[tuple[str, ...]] = ()  # its outputs: names of diag_paths

    @property
    def stage(self) -> str:
        return self.name.removeprefix("diag_")

    def stages(self, plan: Plan) -> list[Stage]:
        paths = diag_paths(plan.cfg)
        return [Stage(self.stage, self.name, self.needs, outputs=tuple(paths[w] for w in self.writes))]

    def inputs(self, plan: Plan, stage: Stage) -> dict[str, Any]:
        dump = _settings(plan).model_dump(mode="json")
        return {k: dump[k] for k in self.sections}

    def data(self, plan: Plan, stage: Stage) -> tuple[Path, ...]:
        folder = model_folder(_settings(plan).base_model, PROJECT_ROOT) if "base_model" in self.sections else None
        return (folder,) if folder is not None else ()

    def params(self, plan: Plan, stage: Stage) -> list[str]:
        return [f"diag.{k}" for k in self.sections]

    def details(self, plan: Plan, stage: Stage, tasks: Counter[tuple[str, str]] | None) -> dict[str, Any]:
        out = {"out": ", ".join(map(str, stage.outputs))} if stage.outputs else {}
        return {**self.shown(_settings(plan)), **out}

    def shown(self, d: DiagSettings) -> dict[str, Any]:
        """What the dry run shows of the stage, besides its outputs."""
        return {}


def _settings(plan: Plan) -> DiagSettings:
    assert plan.cfg.diag is not None
    return plan.cfg.diag


@stage_kind
class Cohort(DiagKind):
    name, rank, runner = "diag_cohort", 10, "flows.diag_pipeline.run_cohort"
    entries = ("components.diag.cohort", "components.diag.validation")
    sections, writes = ("cohort", "out_dir"), ("cohort",)

    def shown(self, d: DiagSettings) -> dict[str, Any]:
        return {"what": f"synthetic cohort of {d.cohort.patients} patients (seed {d.cohort.seed})"}


@stage_kind
class World(DiagKind):
    name, rank, runner = "diag_world", 20, "flows.diag_pipeline.run_world"
    entries = ("components.diag.world", "components.diag.lm_world", "components.diag.fidelity", "components.diag.record")
    sections, needs, writes = ("world", "base_model", "models_dir"), ("cohort",), ("world", "card")

    def shown(self, d: DiagSettings) -> dict[str, Any]:
        lm = d.world.lm
        return {"what": "world-model card: recorded, statistical" + (f", LM ({d.base_model})" if lm.enabled else ""),
                "lm_train_cases": lm.train_cases if lm.enabled else None, "card_cases": lm.card_cases}


# every later stage plays in the statistical world the world stage saved: a refit reruns them
@stage_kind
class ColdStart(DiagKind):
    name, rank, runner = "diag_cold_start", 30, "flows.diag_pipeline.run_cold_start"
    entries = ("components.rl.cold_start", "components.diag.world", "components.diag.record")
    sections = ("cold_start", "env", "base_model", "models_dir")
    needs, writes = ("cohort", "world"), ("cold_start",)

    def shown(self, d: DiagSettings) -> dict[str, Any]:
        s = d.cold_start.sft.schedule
        return {"what": f"SFT of {d.base_model} on oracle trajectories", "cases": d.cold_start.train_cases,
                "epochs": s.epochs, "max_steps": s.max_steps, "learning_rate": s.learning_rate}


@stage_kind
class Grpo(DiagKind):
    name, rank, runner = "diag_grpo", 40, "flows.diag_pipeline.run_grpo"
    entries = ("components.rl.grpo", "components.diag.world", "components.diag.record")
    sections, needs, writes = ("grpo", "env", "models_dir"), ("cohort", "world", "cold_start"), ("grpo",)

    def shown(self, d: DiagSettings) -> dict[str, Any]:
        g = d.grpo.settings
        return {"what": "multi-turn GRPO from the cold start", "steps": g.steps,
                "episodes_per_step": g.episodes_per_step, "max_turns": g.max_turns, "learning_rate": g.learning_rate}


@stage_kind
class DiagEvaluate(DiagKind):
    name, rank, runner = "diag_evaluate", 50, "flows.diag_pipeline.run_evaluate"
    entries = ("components.diag.evaluate", "components.diag.baselines", "components.diag.plots",
               "components.rl.multiturn", "components.rl.play", "components.diag.world", "components.diag.record")
    sections = ("evaluate", "env", "base_model", "dtype")
    needs, writes = ("cohort", "world", "cold_start", "grpo"), ("evaluate",)
    metrics, plots = True, ("accuracy.png", "exam_f1.png")

    def shown(self, d: DiagSettings) -> dict[str, Any]:
        e = d.evaluate
        return {"what": f"{', '.join(e.baselines)}, {'untrained, ' if e.untrained else ''}cold_start, grpo on held-out "
                        "cases", "cases": e.cases or "all", "samples": e.samples, "temperature": e.temperature}


@stage_kind
class DiagRegister(DiagKind):
    name, rank, runner = "diag_register", 60, "flows.diag_pipeline.run_register"
    entries = ("components.registry", "components.registry.content", "components.diag.fidelity",
               "components.diag.metrics", "components.diag.record", "components.envs.episode",
               "components.pipeline.provenance")
    sections, needs = ("agent_registry", "world_registry", "register_on"), ("world", "evaluate", "grpo")

    def inputs(self, plan: Plan, stage: Stage) -> dict[str, Any]:
        return {**super().inputs(plan, stage), "registry": plan.cfg.registry.model_dump(mode="json")}

    def shown(self, d: DiagSettings) -> dict[str, Any]:
        return {"what": f"register grpo as {d.agent_registry} (on per-case {d.register_on})"
                        + (f", the LM world model as {d.world_registry}" if d.world.lm.enabled else "")}
