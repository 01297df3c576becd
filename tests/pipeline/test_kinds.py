"""A stage kind is one object (components/pipeline/kinds/): a kind registered from one file joins the plan, keys its
stages on its own profile keys and code, becomes a DVC stage and runs through its runner, with nothing else edited.
And every kind the project registers names a runner that flows/ has."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.pipeline.describe import describe
from components.pipeline.dvc import dvc_stages
from components.pipeline.kinds import KINDS, StageKind, family, kind_of
from components.pipeline.plan import Plan, PlanError, Stage, build_plan
from components.pipeline.state import PipelineState, stage_files, stage_key
from components.profile.config import CONFIG_DIR, PipelineConfig, load_config
from tests.conftest import ROOT


class Tally(StageKind):
    """Counts the suite's tasks per focus category into a report."""

    name, rank, runner = "tally", 40, "tests.pipeline.test_kinds.run_tally"
    entries = ("components.tasks.record",)
    sections = ("focus",)

    def stages(self, plan: Plan) -> list[Stage]:
        return [Stage("tally", self.name, ("suite",), outputs=(plan.cfg.pipeline.reports_dir / plan.cfg.profile / "tally",))]

    def details(self, plan: Plan, stage: Stage, tasks: Counter[tuple[str, str]] | None) -> dict[str, Any]:
        return {"what": f"tally of {len(plan.cfg.focus or [])} categories"}


def run_tally(plan: Plan, cfg: PipelineConfig, stage: Stage, engines: Any = None) -> dict[str, Any]:
    return {"categories": len(cfg.focus or [])}


@pytest.fixture
def tally(monkeypatch: pytest.MonkeyPatch) -> StageKind:
    kind_of("suite")  # the project's kinds are loaded first
    monkeypatch.setitem(KINDS, "tally", Tally())
    return KINDS["tally"]


def _keys(plan: Plan) -> dict[str, str]:
    keys: dict[str, str] = {}
    for s in plan.stages:
        keys[s.name] = stage_key(plan, s, keys, ROOT)
    return keys


def test_a_kind_registered_from_one_file_runs_through_plan_key_dvc_and_its_runner(tally: StageKind):
    from flows.pipeline import runner

    plan = build_plan(load_config("smoke"))
    assert plan["tally"].needs == ("suite",) and plan["tally"].kind == "tally"
    assert plan.names.index("suite") < plan.names.index("tally") < plan.names.index("evaluate")
    # its key hashes its own profile keys and code, and the suite's key; what else changes leaves it be
    raw = load_config("smoke").model_dump(mode="json", exclude_unset=True)
    before = _keys(plan)
    after = _keys(build_plan(PipelineConfig.model_validate({**raw, "focus": ["calc_anion_gap"]})))
    assert before["tally"] != after["tally"] and before["suite"] == after["suite"]
    raw["training"]["sft"]["schedule"]["learning_rate"] = 1e-3
    assert _keys(build_plan(PipelineConfig.model_validate(raw)))["tally"] == before["tally"]
    assert set(stage_files(ROOT, "tally")) >= {"components/tasks/record.py", "components/common/io.py"}  # its closure
    # a DVC stage: its command, code and the suite's output as deps, its profile keys as params, its folder as outs
    body = dvc_stages(plan, CONFIG_DIR / "smoke.yaml", ROOT)["stages"]["tally"]
    assert body["cmd"] == ".venv/bin/medgym pipeline run --profile smoke --only tally"
    assert "data/smoke" in body["deps"] and "components/tasks/record.py" in body["deps"]
    assert body["params"] == [{"configs/smoke.yaml": ["focus"]}]
    assert body["outs"] == [{"reports/smoke/tally": {"persist": True}}]
    assert "tally" not in yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]  # registered here only
    row = next(r for r in describe(plan, PipelineState(Path("/nonexistent")), ROOT) if r["stage"] == "tally")
    assert row["what"] == "tally of 4 categories"
    assert runner("tally")(plan, plan.cfg, plan["tally"], None) == {"categories": 4}


def test_two_stages_of_one_name_are_refused(tally: StageKind, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(Tally, "stages", lambda self, plan: [Stage("sft", "tally", ("suite",))])
    with pytest.raises(PlanError, match=r"profile smoke: two stages named 'sft' \(a train and a tally\)"):
        build_plan(load_config("smoke"))


def test_a_diag_profile_gets_only_the_diag_familys_kinds(tally: StageKind):
    assert "tally" not in build_plan(load_config("diag-smoke")).names
    assert [k.name for k in family("diag")] == ["diag_cohort", "diag_world", "diag_cold_start", "diag_grpo",
                                                "diag_evaluate", "diag_register"]


def test_every_kind_names_a_runner_that_flows_has():
    from flows.pipeline import runner

    kind_of("suite")
    for name in KINDS:
        assert callable(runner(name)), name
