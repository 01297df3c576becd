"""Training reads train episodes only: a profile whose training stage (sft, verifier, dpo, a self-improvement
round's sft or dpo) names a rollout of the valid or test split, or of every split (no `split:` line), has no plan;
the one-line refusal names the profile file, the stage, the rollout and its split. The checked-in profiles pass."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from components.pipeline.plan import PlanError, build_plan, check_training_episodes
from components.profile.config import CONFIG_DIR, PipelineConfig, load_config

REFUSAL = ("{file}: {stage} reads rollouts.{rollout}, which plays {plays}: training reads train episodes only "
           "(set rollouts.{rollout}.split: train)")


def _profile(tmp_path: Path, base: str, edit: Callable[[dict], None]) -> Path:
    """A checked-in profile as YAML, edited, in its own file (its paths stay those of the original)."""
    raw = yaml.safe_load((CONFIG_DIR / f"{base}.yaml").read_text(encoding="utf-8"))
    edit(raw)
    path = tmp_path / f"{base}-edited.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


def _no_teacher_split(raw: dict) -> None:
    del raw["rollouts"]["teacher"]["split"]


def _dpo_reads_sft_test(raw: dict) -> None:
    raw["training"]["dpo"]["episodes"] = ["teacher", "sft_train", "sft_test"]


def _sft_train_on_valid(raw: dict) -> None:
    raw["rollouts"]["sft_train"]["split"] = "valid"


def _round_mixes_in_every_split(raw: dict) -> None:
    teacher = dict(raw["rollouts"]["teacher"])
    del teacher["split"]
    raw["rollouts"]["teacher_all"] = teacher
    raw["pipeline"]["self_improve"]["dpo"]["episodes"] = ["teacher", "teacher_all"]


@pytest.mark.parametrize(("base", "edit", "stage", "rollout", "plays"), [
    ("demo", _no_teacher_split, "training.sft", "teacher", "every split (it sets no split)"),
    ("demo", _dpo_reads_sft_test, "training.dpo", "sft_test", "split 'test'"),
    ("demo", _sft_train_on_valid, "training.verifier", "sft_train", "split 'valid'"),
    ("smoke", _round_mixes_in_every_split, "pipeline.self_improve.dpo (round1-dpo)", "teacher_all",
     "every split (it sets no split)"),
], ids=["no-split", "test", "valid", "round-mixes-in-no-split"])
def test_a_training_stage_reading_held_out_episodes_has_no_plan(tmp_path, base, edit, stage, rollout, plays):
    path = _profile(tmp_path, base, edit)
    with pytest.raises(PlanError) as err:
        build_plan(load_config(path))
    assert str(err.value) == REFUSAL.format(file=path.resolve(), stage=stage, rollout=rollout, plays=plays)


def test_a_self_improvement_round_playing_the_test_split_to_train_on_has_no_plan(tmp_path):
    def edit(raw: dict) -> None:
        raw["pipeline"]["self_improve"]["train"]["split"] = "test"

    path = _profile(tmp_path, "smoke", edit)
    with pytest.raises(PlanError) as err:
        build_plan(load_config(path))
    assert str(err.value) == (f"{path.resolve()}: pipeline.self_improve.train plays split 'test', and each round's sft "
                              "and dpo train on it: training reads train episodes only (set "
                              "pipeline.self_improve.train.split: train, or leave it out)")


def test_a_round_without_a_train_split_plays_the_train_split():
    raw = load_config("smoke").model_dump(mode="json", exclude_unset=True)
    del raw["pipeline"]["self_improve"]["train"]["split"]
    plan = build_plan(PipelineConfig.model_validate(raw))
    assert plan.cfg.rollouts["round1_train"].split == "train"
    assert plan["round1-sft"].settings.episodes == ["teacher", "round1_train"]


def test_a_profile_built_in_code_is_named_by_its_profile():
    raw = load_config("demo").model_dump(mode="json", exclude_unset=True)
    raw["rollouts"]["sft_train"]["split"] = "test"
    with pytest.raises(PlanError, match=r"^profile demo: training\.verifier reads rollouts\.sft_train, which plays "
                                        r"split 'test'"):
        build_plan(PipelineConfig.model_validate(raw))


@pytest.mark.parametrize("profile", sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
def test_every_checked_in_profile_trains_on_train_episodes_only(profile):
    cfg = load_config(profile)
    assert cfg.source == f"configs/{profile}.yaml"
    plan = build_plan(cfg)
    for stage in plan.stages:
        if stage.kind == "train":
            assert stage.method is not None
            for name in stage.settings.episodes:  # type: ignore[union-attr]
                assert plan.cfg.rollouts[name].split == "train", (stage.name, name)
            check_training_episodes(plan.training_config(stage), stage.method, stage.name)  # `medgym train`'s check


def test_every_pipeline_command_names_the_refusal_in_one_line(tmp_path):
    """`medgym pipeline dvc` (and any command that builds a plan) prints the refusal, not a traceback."""
    import subprocess
    import sys

    path = _profile(tmp_path, "demo", _dpo_reads_sft_test)
    proc = subprocess.run([sys.executable, "-c", "from flows.cli import main; main()", "pipeline", "dvc", "--profile",
                           str(path), "--check"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: " + REFUSAL.format(file=path.resolve(), stage="training.dpo", rollout="sft_test", plays="split 'test'")]
