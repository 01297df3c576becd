"""The model a pipeline registers is chosen on the valid split: the best greedy pass@1 there (ties to the stage
trained first), its test rollout compared in the registry, and the choice recorded with every candidate's valid
figure and the number of looks at the test split; without valid rollouts, the last trained policy, and the record
says that no validation choice was made."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from components.evaluation.leaderboard import Interval, leaderboard
from components.pipeline.plan import PlanError, build_plan
from components.profile.config import PipelineConfig, load_config
from components.registry import Candidate, RegistryConfig, register, select, unselected, valid_figure
from tests.evaluation.test_leaderboard import rollout
from tests.test_registry import evaluated
from tests.test_registry import rollout as scored_rollout
from tests.training.conftest import write_rollout


def figure(value: float, n: int = 16) -> Interval:
    return Interval(value=value, low=max(0.0, value - 0.2), high=min(1.0, value + 0.2), n=n, method="wilson")


def greedy(solved: int, tasks: int = 8, datasets: tuple[str, ...] = ("medcalc",), split: str = "valid") -> list:
    """One greedy episode per task of `split`, the first `solved` correct; tasks spread over `datasets` in turn."""
    eps = rollout({f"t{i}": ["success" if i < solved else "wrong"] for i in range(tasks)})
    return [e.model_copy(update={"dataset": datasets[i % len(datasets)], "split": split}) for i, e in enumerate(eps)]


# ------------------------------------------------------------------------------------------------- the pure rule
def test_the_best_on_valid_is_chosen_whatever_the_order_and_the_record_names_every_candidate():
    sft = Candidate(stage="sft", valid_rollout="sft_valid", test_rollout="sft_test", valid=figure(0.25))
    dpo = Candidate(stage="dpo", valid_rollout="dpo_valid", test_rollout="dpo_test", valid=figure(0.5))
    chosen = select([sft, dpo], test_reads=2)
    assert (chosen.on, chosen.chosen, chosen.test_rollout, chosen.test_reads) == ("valid", "dpo", "dpo_test", 2)
    assert chosen.candidates == [sft, dpo]
    assert "chosen on valid: dpo" in chosen.reason and "sft 0.250 [0.050, 0.450]" in chosen.reason
    assert "2 looks at the test split" in chosen.reason
    assert select([dpo.model_copy(update={"valid": figure(0.1)}), sft], test_reads=2).chosen == "sft"


def test_a_tie_on_valid_goes_to_the_stage_trained_first():
    sft = Candidate(stage="sft", valid_rollout="sft_valid", test_rollout="sft_test", valid=figure(0.5))
    dpo = Candidate(stage="dpo", valid_rollout="dpo_valid", test_rollout="dpo_test", valid=figure(0.5, n=16))
    chosen = select([sft, dpo], test_reads=2, not_candidates=["round1-dpo"])
    assert chosen.chosen == "sft" and "tied with dpo" in chosen.reason
    assert chosen.not_candidates == ["round1-dpo"] and "not candidates: round1-dpo" in chosen.reason
    with pytest.raises(ValueError, match="no candidate"):
        select([], test_reads=0)


def test_without_valid_rollouts_the_record_says_no_validation_choice_was_made():
    lone = unselected("dpo", "dpo_test", test_reads=1)
    assert lone.on is None and lone.candidates == [] and lone.chosen == "dpo"
    assert lone.reason.startswith("no validation choice was made") and "1 look at the test split" in lone.reason


def test_the_valid_figure_is_the_leaderboards_headline_and_sampled_episodes_are_refused():
    eps = greedy(5, datasets=("medcalc", "ehr"))
    fig = valid_figure("dpo_valid", eps)
    assert fig == leaderboard({"dpo_valid": eps}).row("dpo_valid").success
    assert fig.value == pytest.approx((3 / 4 + 2 / 4) / 2) and fig.method == "stratified bootstrap"  # mean over datasets
    sampled = rollout({f"t{i}": ["success"] for i in range(4)}, temperatures=(0.6,))
    with pytest.raises(ValueError, match="rollout 'dpo_valid' has no greedy episodes"):
        valid_figure("dpo_valid", [e.model_copy(update={"split": "valid"}) for e in sampled])


def test_a_rollout_of_another_split_cannot_choose_the_model_to_register():
    with pytest.raises(ValueError, match=r"rollout 'dpo_valid' chooses .* task 't0' is from the 'test' split \(7 more\)"):
        valid_figure("dpo_valid", greedy(5, split="test"))


# ------------------------------------------------------------------------------------------------- the plan
def _profile(tmp_path: Path, valid: bool = True) -> PipelineConfig:
    """configs/smoke.yaml, every rollout in tmp_path, with SFT played on test and both models on valid."""
    raw = load_config("smoke").model_dump(mode="json", exclude_unset=True)
    raw["data"]["out_dir"] = str(tmp_path / "suite")
    raw["training"] |= {"out_dir": str(tmp_path / "models"), "data_dir": str(tmp_path / "training")}
    raw["pipeline"]["reports_dir"] = str(tmp_path / "reports")
    raw["rollouts"]["sft_test"] = {**raw["rollouts"]["dpo_test"], "plays": None,
                                   "policy": {"backend": "hf", "options": {"model": {"stage": "sft"}}}}
    if valid:
        for m in ("sft", "dpo"):
            raw["rollouts"][f"{m}_valid"] = {"policy": {"backend": "hf", "options": {"model": {"stage": m}}},
                                             "plan": {"k": 1, "max_new_tokens": 32}, "split": "valid"}
    for name, r in raw["rollouts"].items():
        r["out_dir"] = str(tmp_path / "rollouts" / name)
    return PipelineConfig.model_validate(raw)


def test_the_register_stage_reads_every_candidate_on_valid_and_on_test(tmp_path):
    plan = build_plan(_profile(tmp_path))
    assert [(p.stage.name, p.test, p.valid) for p in plan.policies()] == [
        ("sft", "sft_test", "sft_valid"), ("grpo", "grpo_test", None), ("dpo", "dpo_test", "dpo_valid"),
        ("round1-sft", None, None), ("round1-dpo", "round1_test", None)]
    assert plan["register"].needs == ("evaluate", "sft", "sft_valid", "sft_test", "dpo", "dpo_valid", "dpo_test")
    assert {"sft_valid", "dpo_valid"} <= set(plan["evaluate"].needs) and "sft_valid" not in plan.evaluated()
    assert plan.test_reads() == 4  # sft, grpo, dpo and round1-dpo are each read on test by the leaderboard
    # without valid rollouts: the last trained policy, as before
    assert build_plan(_profile(tmp_path, valid=False))["register"].needs == ("evaluate", "round1-dpo", "round1_test")


def test_a_round_with_a_valid_rollout_is_a_candidate_for_registration(tmp_path):
    cfg = _profile(tmp_path)
    si = cfg.pipeline.self_improve
    valid = si.test.model_copy(update={"split": None})
    cfg = cfg.model_copy(update={"pipeline": cfg.pipeline.model_copy(
        update={"self_improve": si.model_copy(update={"valid": valid})})})
    plan = build_plan(cfg)
    assert plan.cfg.rollouts["round1_valid"].split == "valid"
    assert plan.cfg.rollouts["round1_valid"].policy.options["model"] == str(
        tmp_path / "models" / "smoke" / "round1-dpo" / "merged")
    assert [(p.stage.name, p.test, p.valid) for p in plan.on_valid()][-1] == ("round1-dpo", "round1_test",
                                                                              "round1_valid")
    assert plan["register"].needs[-3:] == ("round1-dpo", "round1_valid", "round1_test")
    assert "round1_valid" in plan["evaluate"].needs and "round1_valid" not in plan.evaluated()


def test_a_model_played_on_valid_but_never_on_test_has_no_plan(tmp_path):
    cfg = _profile(tmp_path)
    rollouts = {k: v for k, v in cfg.rollouts.items() if k != "sft_test"}
    with pytest.raises(PlanError, match=r"rollouts.sft_valid plays sft's model on valid, and no test rollout plays it"):
        build_plan(cfg.model_copy(update={"rollouts": rollouts}))


# ------------------------------------------------------------------------------------------------- the pipeline
def _played(cfg: PipelineConfig, solved: dict[str, int]) -> None:
    for name, n in solved.items():
        shutil.rmtree(cfg.rollout_dir(name), ignore_errors=True)
        write_rollout(cfg.rollout_dir(name), greedy(n, split="valid" if name.endswith("_valid") else "test"))


def test_the_pipeline_registers_the_best_on_valid_even_where_another_looks_better_on_test(tmp_path):
    from flows.pipeline import choose

    cfg = _profile(tmp_path)
    plan = build_plan(cfg)
    _played(cfg, {"sft_valid": 3, "dpo_valid": 5, "sft_test": 8, "dpo_test": 2})
    chosen = choose(plan, cfg)
    assert (chosen.on, chosen.chosen, chosen.test_rollout, chosen.test_reads) == ("valid", "dpo", "dpo_test", 4)
    assert [(c.stage, c.valid.value) for c in chosen.candidates] == [("sft", 3 / 8), ("dpo", 5 / 8)]
    assert chosen.not_candidates == ["grpo", "round1-sft", "round1-dpo"]
    _played(cfg, {"dpo_valid": 3})  # the same figure as sft's: the first trained is kept
    assert choose(plan, cfg).chosen == "sft"

    last = build_plan(_profile(tmp_path, valid=False))
    lone = choose(last, last.cfg)
    assert (lone.on, lone.chosen, lone.test_rollout) == (None, "round1-dpo", "round1_test")


def test_the_registered_version_records_the_choice_on_valid(model_store, tmp_path):
    from mlflow.tracking import MlflowClient

    tracking, uri = model_store
    choice = select([Candidate(stage="sft", valid_rollout="sft_valid", test_rollout="sft_test", valid=figure(0.25)),
                     Candidate(stage="dpo", valid_rollout="dpo_valid", test_rollout="dpo_test", valid=figure(0.5))],
                    test_reads=2)
    decision = register(RegistryConfig(name="chosen"), tracking, evaluated(scored_rollout(9)), model_uri=uri,
                        baseline=evaluated(scored_rollout(1)), selection=choice)
    assert decision.selection == choice and decision.comparison is not None  # its test rollout, paired and tested
    client = MlflowClient(tracking_uri=tracking.mlflow_uri)
    v = client.get_model_version("chosen", decision.version)
    assert v.tags["medgym.selection.on"] == "valid" and v.tags["medgym.selection.chosen"] == "dpo"
    assert v.tags["medgym.selection.test_reads"] == "2"
    assert v.tags["medgym.selection.candidates"] == "sft=0.250 [0.050, 0.450]; dpo=0.500 [0.300, 0.700]"
    assert v.description.startswith("chosen on valid: dpo") and decision.reason in v.description
    recorded = json.loads(Path(client.download_artifacts(decision.run_id, "evaluation/decision.json")).read_text())
    assert recorded["selection"]["chosen"] == "dpo" and len(recorded["selection"]["candidates"]) == 2
    assert client.get_run(decision.run_id).data.metrics["valid.dpo"] == 0.5

    lone = register(RegistryConfig(name="chosen-lone"), tracking, evaluated(scored_rollout(9)), model_uri=uri,
                    selection=unselected("dpo", "dpo_test", test_reads=1))
    tags = client.get_model_version("chosen-lone", lone.version).tags
    assert tags["medgym.selection.on"] == "none" and "medgym.selection.candidates" not in tags
    assert tags["medgym.selection.reason"].startswith("no validation choice was made")


def test_the_register_flow_refuses_a_selection_of_another_rollout(tmp_path):
    from flows.register import register_flow

    choice = unselected("dpo", "dpo_test", test_reads=1)
    with pytest.raises(ValueError, match="the selection chose dpo, whose test rollout is dpo_test, not sft_test"):
        register_flow.fn(_profile(tmp_path), "sft_test", model_uri="models:/x/1", selection=choice)


def _suite(cfg: PipelineConfig, tasks: int = 8) -> None:
    """The task file the fake rollouts played: the prompts their episodes were shown."""
    from components.tasks.record import AnswerSpec, Task, save_tasks

    save_tasks(Path(cfg.data.out_dir) / "tasks.jsonl",
               [Task(task_id=f"t{i}", dataset="medcalc", category="c", domain="calculator", split="test",
                     prompt=f"Solve t{i}.", answer=2, answer_spec=AnswerSpec(type="integer")) for i in range(tasks)])


def test_the_register_stage_registers_the_model_chosen_on_valid_with_its_test_rollout(model_store, tmp_path,
                                                                                      tiny_model):
    """The stage's runner, outside any flow run (it calls the register flow's function, no Prefect server)."""
    import flows.pipeline
    from components.pipeline.paths import dataset_dir, merged_dir
    from components.training.datasets import DatasetManifest

    tracking, _ = model_store
    cfg = _profile(tmp_path).model_copy(update={"tracking": tracking})
    cfg = cfg.model_copy(update={"registry": cfg.registry.model_copy(update={"name": "stage-chosen"})})
    plan = build_plan(cfg)
    _suite(cfg)
    _played(cfg, {"sft_valid": 6, "dpo_valid": 2, "sft_test": 5, "dpo_test": 8, "base": 1})
    for m in ("sft", "dpo"):
        shutil.copytree(tiny_model, merged_dir(cfg, m))
        manifest = DatasetManifest(kind={"sft": "sft", "dpo": "preference"}[m], rows=1, content_hash=f"{m}-rows",
                                   sources=[], tokenizer="t", stats={}, settings={})
        dataset_dir(cfg, m).mkdir(parents=True)
        (dataset_dir(cfg, m) / "manifest.json").write_text(manifest.model_dump_json())
    out = flows.pipeline.run_register(plan, cfg, plan["register"])
    assert (out["chosen"], out["chosen_on"], out["test_reads"]) == ("sft", "valid", 4)

    from mlflow.tracking import MlflowClient

    v = MlflowClient(tracking_uri=tracking.mlflow_uri).get_model_version("stage-chosen", out["version"])
    assert v.tags["medgym.data.dataset.sft"] == "sft-rows" and "medgym.data.dataset.dpo" not in v.tags
    assert v.tags["medgym.eval.reference"] == str(cfg.rollout_dir("sft_test"))  # its test rollout, not dpo's
    assert v.tags["medgym.eval.success"] == "0.625000" and v.tags["medgym.selection.chosen"] == "sft"


def test_the_evaluate_stage_ranks_valid_rollouts_on_a_board_of_their_own(tmp_path):
    import flows.pipeline
    from components.tracking.tracker import TrackingConfig

    cfg = _profile(tmp_path).model_copy(update={"tracking": TrackingConfig(
        mlflow_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", artifact_location=str(tmp_path / "artifacts"))})
    stages = ["suite", "teacher", "base", "sft", "sft_test", "sft_valid", "evaluate"]
    plan = build_plan(cfg.model_copy(update={"pipeline": cfg.pipeline.model_copy(update={"stages": stages})}))
    assert plan["evaluate"].needs == ("base", "sft_test", "sft_valid")
    _played(cfg, {"base": 1, "sft_test": 5, "sft_valid": 6})
    out = flows.pipeline.run_evaluate(plan, plan.cfg, plan["evaluate"])
    board = Path(out["report_dir"])
    test_md, valid_md = (board / "leaderboard.md").read_text(), (board / "valid" / "leaderboard.md").read_text()
    assert "sft_test" in test_md and "sft_valid" not in test_md
    assert "sft_valid" in valid_md and "sft_test" not in valid_md and "base" not in valid_md
    metrics = json.loads((tmp_path / "reports" / "smoke" / "metrics.json").read_text())
    assert metrics["sft_valid.success"] == out["sft_valid.success"] == 0.75 and "sft_valid.difference" not in metrics
    assert metrics["sft_test.success"] == 0.625
