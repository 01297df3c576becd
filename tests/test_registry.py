"""The Model Registry: a real sqlite MLflow store, a tiny random Llama, and promotion decided task by task by the
exact paired test, on tasks matched by content and under equal conditions."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from components.evaluation.report import compare, task_success
from components.profile.config import PipelineConfig
from components.registry import TASK_SUCCESS_TAG, Evaluation, RegistryConfig, git_commit, register
from tests.conftest import ROOT
from tests.evaluation.test_leaderboard import episode
from tests.training.conftest import write_rollout

TASKS = 12
CONDITIONS = {"k": 2, "first_temperature": 0.0, "temperature": 0.6, "max_turns": 10, "split": "test"}


def rollout(correct_tasks: int, samples: int = 2) -> list:
    """Episodes of TASKS tasks, `samples` each: tasks below `correct_tasks` solved every time, the rest never."""
    return [episode(f"t{i:02d}", s, "success" if i < correct_tasks else "wrong")
            for i in range(TASKS) for s in range(samples)]


def evaluated(played: dict[str, float] | list, **kw) -> Evaluation:
    """An evaluation of episodes or per-task scores on the same TASKS tasks, played under CONDITIONS."""
    scores = played if isinstance(played, dict) else task_success(played)
    return Evaluation(task_success=scores, task_hashes={t: f"content of {t}" for t in scores}, conditions=CONDITIONS,
                      **kw)


def write_tasks(path: Path) -> Path:
    """A task file of the TASKS tasks `rollout` plays (the prompts their episodes were shown)."""
    from components.tasks.record import AnswerSpec, Task, save_tasks

    save_tasks(path, [Task(task_id=f"t{i:02d}", dataset="d", category="c", domain="calculator", split="test",
                           prompt=f"Solve t{i:02d}.", answer=2, answer_spec=AnswerSpec(type="integer"))
                      for i in range(TASKS)])
    return path


def test_a_supported_win_over_the_baseline_is_champion_a_next_unsupported_one_challenger_and_a_fresh_process_loads_it(
        model_store, tiny_model):
    from mlflow.tracking import MlflowClient

    tracking, uri = model_store
    cfg = RegistryConfig(name="agent")
    base, first, second = rollout(1), rollout(9), rollout(10)
    client = MlflowClient(tracking_uri=tracking.mlflow_uri)

    one = register(cfg, tracking, evaluated(first, reference="data/rollouts/t/sft-test", scores={"pass@1": 0.75}),
                   model_uri=uri, baseline=evaluated(base), data_versions={"suite": "md5:abc"})
    assert one.promoted and one.alias == "champion" and one.version == "1" and one.previous_champion is None
    c = one.comparison
    assert c is not None and c.against == "baseline" and len(c.tasks) == TASKS
    t = c.test  # 8 tasks solved by the candidate only: p = 2^-8 under the sign test, below 0.05·6/π²
    assert (t.test, t.wins, t.losses, t.ties, t.look) == ("exact sign test", 8, 0, 4, 1)
    assert t.p_value == pytest.approx(2 ** -8) and t.alpha == pytest.approx(0.05 * 6 / math.pi ** 2)
    # reported beside the test: the same paired bootstrap an eval report gives for these two rollouts
    assert {"value": t.difference, "low": t.low, "high": t.high, "n": t.n_tasks} == \
        compare(base, first)["overall"]["difference"]
    v1 = client.get_model_version_by_alias("agent", "champion")
    assert str(v1.version) == "1" and v1.description == one.reason and "promoted: p 0.003906" in one.reason
    assert v1.tags["medgym.decision.test"] == "exact sign test" and v1.tags["medgym.decision.p_value"] == "0.00390625"
    assert (v1.tags["medgym.decision.wins"], v1.tags["medgym.decision.losses"], v1.tags["medgym.decision.ties"],
            v1.tags["medgym.decision.look"], v1.tags["medgym.decision.alpha"]) == ("8", "0", "4", "1", "0.05")
    assert v1.tags["medgym.data.suite"] == "md5:abc" and v1.tags["medgym.eval.pass_at_1"] == "0.75"
    assert v1.tags["medgym.git.commit"] == git_commit(ROOT)[0] != "unknown"
    assert float(v1.tags["medgym.eval.success"]) == pytest.approx(9 / 12)
    assert v1.tags["medgym.eval.reference"] == "data/rollouts/t/sft-test"
    assert v1.tags[TASK_SUCCESS_TAG] == one.task_success_uri and one.run_id in one.task_success_uri

    # one more task solved: +1/12 on average, one discordant task, so no promotion
    two = register(cfg, tracking, evaluated(second), model_dir=tiny_model, commit="abc123")
    assert not two.promoted and two.alias == "challenger" and two.version == "2" and two.previous_champion == "1"
    c = two.comparison
    assert c is not None and c.against == "champion" and c.against_version == "1" and c.test.look == 1
    assert c.test.difference == pytest.approx(1 / 12) and c.test.p_value == 0.5 and len(c.tasks) == TASKS
    assert two.reason.startswith("candidate − champion v1 success over 12 paired tasks (0 candidate-only, 0 champion-only")
    assert "not promoted: p 0.5 > alpha 0.0304; 1 discordant task(s) < the 5 required" in two.reason
    v2 = client.get_model_version_by_alias("agent", "challenger")
    assert str(v2.version) == "2" and v2.description == two.reason and v2.tags["medgym.decision"] == "challenger"
    assert v2.tags["medgym.decision.against"] == "champion v1" and v2.tags["medgym.decision.shared_tasks"] == "12"
    assert v2.tags["medgym.git.commit"] == "abc123" and float(v2.tags["medgym.decision.low"]) == pytest.approx(c.test.low)
    assert str(client.get_model_version_by_alias("agent", "champion").version) == "1"
    decision_json = json.loads(Path(client.download_artifacts(two.run_id, "evaluation/decision.json")).read_text())
    assert decision_json["reason"] == two.reason and decision_json["comparison"]["test"]["p_value"] == 0.5
    hashes = json.loads(Path(client.download_artifacts(two.run_id, "evaluation/task_hashes.json")).read_text())
    assert hashes == {f"t{i:02d}": f"content of t{i:02d}" for i in range(TASKS)}
    assert json.loads(Path(client.download_artifacts(two.run_id, "evaluation/conditions.json")).read_text()) == CONDITIONS

    script = textwrap.dedent("""
        import json, mlflow
        from mlflow.tracking import MlflowClient
        pipe = mlflow.transformers.load_model("models:/agent@champion")
        out = pipe("Compute the BMI", max_new_tokens=5, do_sample=False)[0]["generated_text"]
        print(json.dumps({"version": MlflowClient().get_model_version_by_alias("agent", "champion").version,
                          "task": pipe.task, "text": out}))
    """)
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking.mlflow_uri, "MLFLOW_REGISTRY_URI": tracking.mlflow_uri,
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                          cwd=tiny_model.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert str(got["version"]) == "1" and got["task"] == "text-generation"
    assert isinstance(got["text"], str) and got["text"].startswith("Compute") and len(got["text"]) > len("Compute the BMI")


def test_the_flow_holds_back_a_win_the_margin_does_not_cover_and_a_first_model_with_nothing_to_beat(
        model_store, tmp_path):
    from flows.register import register_flow

    tracking, uri = model_store
    rollouts = {"base-test": write_rollout(tmp_path / "base", rollout(1)),
                "sft-test": write_rollout(tmp_path / "sft", rollout(9))}
    write_tasks(tmp_path / "suite" / "tasks.jsonl")  # the profile's suite: what the rollouts played
    cfg = PipelineConfig.model_validate({"profile": "t", "tracking": tracking.model_dump(),
                                         "data": {"out_dir": str(tmp_path / "suite")},
                                         "rollouts": {k: {"out_dir": str(v)} for k, v in rollouts.items()}})
    path = tmp_path / "t.yaml"
    path.write_text(json.dumps(cfg.model_dump(mode="json")))

    # the same +2/3 win as above, but a margin above its lower bound
    held = register_flow.fn(str(path), "sft-test", baseline="base-test", model_uri=uri,
                            registry=RegistryConfig(name="strict", margin=0.9))
    assert held["alias"] == "challenger" and not held["promoted"]
    assert held["comparison"]["against"] == "baseline" and held["comparison"]["test"]["p_value"] < 0.01
    assert "not promoted: difference +0.6667 <= margin +0.9000" in held["reason"]
    assert held["comparison"]["against_reference"] == str(rollouts["base-test"])

    lone = register_flow.fn(str(path), "sft-test", model_uri=uri, registry=RegistryConfig(name="lone"))
    assert lone["alias"] == "challenger" and lone["comparison"] is None
    assert "no champion and no baseline" in lone["reason"]

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking.mlflow_uri)
    tags = client.get_model_version("strict", held["version"]).tags
    assert len(tags["medgym.data.rollout.sft-test"]) == 64 and "medgym.data.rollout.base-test" in tags
    # what the flow recorded of the rollout: each task's content hash, read from the suite, and its conditions
    hashes = json.loads(Path(client.download_artifacts(held["run_id"], "evaluation/task_hashes.json")).read_text())
    assert sorted(hashes) == [f"t{i:02d}" for i in range(TASKS)] and len(set(hashes.values())) == TASKS
    conditions = json.loads(Path(client.download_artifacts(held["run_id"], "evaluation/conditions.json")).read_text())
    assert conditions == {"k": 2, "split": "test"}  # these hand-made episodes record no sampling or environment


def test_a_candidate_is_only_paired_with_a_champion_or_baseline_evaluated_on_the_same_metric(model_store):
    """A per-task accuracy against a per-task exam F1 would be a difference of unlike things: no promotion on it,
    however large; the metric is tagged and read back, and the next candidate on the champion's metric pairs."""
    from mlflow.tracking import MlflowClient

    tracking, uri = model_store
    cfg = RegistryConfig(name="metric")
    f1 = {f"t{i:02d}": 0.1 for i in range(TASKS)}
    one = register(cfg, tracking, evaluated({t: 0.9 for t in f1}, metric="exam_f1"), model_uri=uri,
                   baseline=evaluated(f1, metric="exam_f1"))
    assert one.promoted and "sign-flip permutation test on exam_f1" in one.reason and "difference +0.8000" in one.reason
    assert MlflowClient(tracking_uri=tracking.mlflow_uri).get_model_version("metric", "1").tags[
        "medgym.eval.metric"] == "exam_f1"

    acc = register(cfg, tracking, evaluated({t: 1.0 for t in f1}, metric="accuracy"), model_uri=uri)
    assert acc.alias == "challenger" and acc.comparison is None
    assert acc.reason == ("the candidate was evaluated on accuracy, champion v1 on exam_f1: not comparable, "
                          "so no promotion")
    unlike_baseline = register(RegistryConfig(name="metric-b"), tracking, evaluated(f1), model_uri=uri,
                               baseline=evaluated({t: 0.0 for t in f1}, metric="accuracy"))
    assert unlike_baseline.comparison is None and "the baseline on accuracy" in unlike_baseline.reason

    same = register(cfg, tracking, evaluated({t: 0.95 for t in f1}, metric="exam_f1"), model_uri=uri)
    assert same.comparison is not None and same.comparison.against_version == "1"
    assert same.comparison.test.difference == pytest.approx(0.05)


def test_an_evaluation_refuses_success_outside_the_unit_interval_an_empty_one_and_hashes_of_other_tasks():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        Evaluation(task_success={"t": 1.5})
    with pytest.raises(ValueError, match="at least one task"):
        Evaluation(task_success={})
    with pytest.raises(ValueError, match="task_hashes must cover exactly the scored tasks; 1 differ, e.g. 'u'"):
        Evaluation(task_success={"t": 1.0}, task_hashes={"t": "h", "u": "h"})


def test_register_refuses_a_candidate_whose_tasks_no_later_candidate_could_be_matched_with(model_store):
    tracking, uri = model_store
    with pytest.raises(ValueError, match="has no task_hashes and no conditions; without them no later candidate"):
        register(RegistryConfig(name="unhashed"), tracking, Evaluation(task_success={"t": 1.0}), model_uri=uri)
