"""`medgym eval compare` through the real command: two rollout folders (played by the scripted teacher in the process
sandbox, or written by the real EpisodeStore), or a rollout folder and a registered version, compared by the
registry's own decision; and `medgym eval --rollout` still runs the report."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from components.envs.coding_env import EnvConfig
from components.policies.registry import PolicyConfig
from components.registry import RegistryConfig, register, rollout_evaluation
from components.rollout.collect import collect
from components.rollout.jobs import SamplingPlan
from components.rollout.runner import CollectionConfig
from components.rollout.store import load_episodes_dir
from components.tracking.tracker import TrackingConfig
from tests.conftest import ROOT
from tests.test_registry import TASKS, rollout, write_tasks
from tests.training.conftest import write_rollout


def medgym(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / ".venv" / "bin" / "medgym"), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def profile(tmp_path_factory, tiny_model) -> dict:
    """A profile whose suite is TASKS hand-written tasks, with two rollouts of them written by the real store
    (`strong` solves 9 tasks, `weak` 1) and `weak` registered as version 1 of `agent` in its sqlite store."""
    from components.tracking.training import training_run

    root = tmp_path_factory.mktemp("compare")
    tracking = TrackingConfig(mlflow_uri=f"sqlite:///{root / 'mlflow.db'}", artifact_location=str(root / "artifacts"),
                              experiment="t")
    tasks = write_tasks(root / "suite" / "tasks.jsonl")
    folders = {"strong": write_rollout(root / "strong", rollout(9)), "weak": write_rollout(root / "weak", rollout(1))}
    with training_run(tracking, "t-model", system_metrics=False) as run:
        uri = run.log_model(tiny_model)
    weak = rollout_evaluation(load_episodes_dir(folders["weak"]).episodes, tasks, reference=str(folders["weak"]))
    assert register(RegistryConfig(name="agent"), tracking, weak, model_uri=uri).alias == "challenger"
    config = root / "profile.yaml"
    config.write_text(yaml.safe_dump({"profile": "t", "tracking": tracking.model_dump(mode="json"),
                                      "data": {"out_dir": str(root / "suite")},
                                      "rollouts": {k: {"out_dir": str(v)} for k, v in folders.items()}}))
    return {"config": str(config), "tasks": str(tasks), **{k: str(v) for k, v in folders.items()}}


FIGURES = ["paired tasks: 12 (0 candidate-only, 0 reference-only)",
           "difference (success): +0.6667, 95% CI [+0.4167, +0.9167]",
           "test: exact sign test, one-sided p = 0.003906; alpha 0.05 spent to 0.0304 at look 1",
           "discordant: 8 wins, 0 losses (4 ties)",
           "verdict: promote"]


def test_two_rollout_folders_are_compared_by_the_registrys_test_and_a_later_look_spends_alpha(profile):
    res = medgym("eval", "compare", "--candidate", profile["strong"], "--reference", profile["weak"],
                 "--config", profile["config"])
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.strip().splitlines()
    assert lines[:2] == [f"candidate: {profile['strong']}", f"reference: {profile['weak']}"]
    assert lines[2:7] == FIGURES
    assert lines[7].startswith("reason: candidate − the reference success over 12 paired tasks")

    third = medgym("eval", "compare", "--candidate", profile["strong"], "--reference", profile["weak"],
                   "--config", profile["config"], "--tasks", profile["tasks"], "--look", "3")
    assert third.returncode == 0, third.stderr[-3000:]
    assert "verdict: do not promote: p 0.003906 > alpha 0.003377" in third.stdout.splitlines()
    assert "alpha 0.05 spent as 0.05·6/(π²·9) = 0.0034" in third.stdout


def test_a_rollout_folder_against_a_registered_version_by_number_or_alias_gives_the_same_figures(profile):
    for ref in ("models:/agent/1", "models:/agent@challenger"):
        res = medgym("eval", "compare", "--candidate", profile["strong"], "--reference", ref,
                     "--config", profile["config"])
        assert res.returncode == 0, res.stderr[-3000:]
        assert res.stdout.strip().splitlines()[1:7] == [f"reference: {ref}", *FIGURES]


@pytest.mark.parametrize(("args", "message"), [
    (["--reference", "models:/agent/7"], "error: models:/agent/7: no such registered version"),
    (["--reference", "no/such/folder"], "error: no/such/folder: neither a rollout folder (no episodes/ in it) nor a "
                                        "registered version (models:/<name>/<version>, models:/<name>@<alias>)"),
    (["--reference", "models:/agent/1", "--metric", "exam_f1"],
     "error: {strong}: a rollout folder is scored on success per task; --metric exam_f1 needs registered versions "
     "evaluated on it"),
])
def test_what_cannot_be_read_as_an_evaluation_is_a_one_line_error(profile, args, message):
    res = medgym("eval", "compare", "--candidate", profile["strong"], *args, "--config", profile["config"])
    assert res.returncode != 0
    assert res.stderr.strip().splitlines()[-1].startswith(message.format(**profile))
    assert "Traceback" not in res.stderr


def test_the_report_still_runs_as_medgym_eval_with_options_only(profile, tmp_path):
    out = tmp_path / "report.json"
    res = medgym("eval", "--rollout", "strong", "--baseline", "weak", "--config", profile["config"], "--out", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["rollout"] == "strong" and report["versus_baseline"]["tasks"] == TASKS
    assert report["versus_baseline"]["overall"]["difference"]["value"] == pytest.approx(8 / 12)


def teacher(max_turns: int) -> CollectionConfig:
    return CollectionConfig(policy=PolicyConfig(backend="scripted", options={"mistake_rate": 0.5}),
                            plan=SamplingPlan(k=1), split="test", workers=2, sandbox_backend="process",
                            env=EnvConfig(max_turns=max_turns))


def test_scripted_rollouts_of_a_real_suite_are_paired_under_equal_conditions_and_refused_under_others(
        small_suite, tmp_path):
    eight, six = tmp_path / "eight", tmp_path / "six"
    collect(small_suite, eight, teacher(8))
    collect(small_suite, six, teacher(6))
    played = len(load_episodes_dir(eight).episodes)

    same = medgym("eval", "compare", "--candidate", str(eight), "--reference", str(eight), "--tasks", str(small_suite))
    assert same.returncode == 0, same.stderr[-3000:]
    assert f"paired tasks: {played} (0 candidate-only, 0 reference-only)" in same.stdout
    assert "discordant: 0 wins, 0 losses" in same.stdout and "verdict: do not promote: p 1 > alpha" in same.stdout

    other = medgym("eval", "compare", "--candidate", str(six), "--reference", str(eight), "--tasks", str(small_suite))
    assert other.returncode == 0, other.stderr[-3000:]
    assert other.stdout.strip().splitlines()[-1] == (
        "verdict: not compared: conditions differ (candidate vs the reference): max_turns 6 vs 8: not comparable, so "
        "no promotion")
