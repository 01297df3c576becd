"""The DiagGym registration records each held-out case's content hash and the conditions of the evaluation (from the
profile), and pairs a new agent with the champion only under the same ones: the register flow on a real cohort,
baseline agents' episodes and a real sqlite MLflow store."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from components.diag.cohort import CohortConfig, build_cohort
from components.diag.evaluate import agent_episodes_dir, run_agent
from components.diag.fidelity import evaluate_fidelity, write_card
from components.diag.record import save_cases
from components.diag.world import StatisticalWorldModel
from components.pipeline.kinds.diag import diag_paths
from components.profile.config import PipelineConfig
from components.registry import case_hashes
from flows.diag_pipeline import TEST, WORLD_FILE

HELD = 20  # held-out cases played


@pytest.fixture(scope="module")
def profile(tmp_path_factory, tiny_model) -> PipelineConfig:
    """A diag profile whose cohort, evaluation episodes (grpo: the greedy baseline's, cold_start: the random one's),
    world card and merged checkpoints are on disk, as the stages before `register` leave them."""
    from components.diag.baselines import make_baselines

    root = tmp_path_factory.mktemp("diag")
    cfg = PipelineConfig.model_validate({
        "profile": "diag-register-test",
        "tracking": {"mlflow_uri": f"sqlite:///{root / 'mlflow.db'}", "artifact_location": str(root / "artifacts"),
                     "experiment": "t"},
        "pipeline": {"reports_dir": str(root / "reports")},
        "diag": {"out_dir": str(root / "cohort"), "models_dir": str(root / "models"),
                 "evaluate": {"samples": 2}, "agent_registry": "diag-agent", "world_registry": "diag-world"}})
    cases = build_cohort(CohortConfig(patients=120, seed=3, valid_fraction=0.2))
    paths = diag_paths(cfg)  # where the stages before `register` leave their outputs, as the pipeline says
    save_cases(paths["cohort"] / "cases.jsonl", cases)
    train, test = [c for c in cases if c.split == "train"], [c for c in cases if c.split == "test"][:HELD]
    world = StatisticalWorldModel.fit(train, seed=0)
    tested = paths["evaluate"] / TEST  # registration reads the test split's episodes, each agent's in its store
    for name, agent in zip(("cold_start", "grpo"), make_baselines(["random", "greedy"], train, world), strict=True):
        run_agent(agent, test, world, samples=2, out_dir=agent_episodes_dir(tested, name))
    metrics = {m: {"value": 0.5} for m in ("accuracy", "f1_mean", "avg_turns")}
    (tested / "report.json").write_text(json.dumps({"agents": [{"agent": "grpo", "metrics": metrics}]}))
    stat = evaluate_fidelity(world, test, seed=0)
    lm = stat.model_copy(update={"model": "lm", "case_consistency": {c: 1.0 for c in stat.case_consistency}})
    write_card([stat, lm], paths["card"])
    for stage in ("grpo", "world"):
        paths[stage].mkdir(parents=True)
        (paths[stage] / "merged").symlink_to(tiny_model, target_is_directory=True)
    world.save(paths["world"] / WORLD_FILE)  # the one world the world stage fits and saves
    return cfg


def test_the_diag_agent_is_registered_with_its_cases_hashes_and_conditions_and_paired_only_under_the_same(profile):
    from mlflow.tracking import MlflowClient

    from components.diag.record import load_cases
    from flows.diag_pipeline import register_flow

    client = MlflowClient(tracking_uri=profile.tracking.mlflow_uri)
    first = register_flow.fn(profile)  # the greedy oracle's episodes against the random agent's: a clear win
    assert first["version"] == "1" and first["promoted"] and first["world_version"] == "1"
    v1 = client.get_model_version("diag-agent", "1")
    assert v1.tags["medgym.decision.against"] == "baseline" and v1.tags["medgym.decision.look"] == "1"
    run_id = v1.tags["medgym.eval.task_hashes"].split("/")[1]
    hashes = json.loads(Path(client.download_artifacts(run_id, "evaluation/task_hashes.json")).read_text())
    held = load_cases(Path(profile.diag.out_dir) / "cases.jsonl", split="test")[:HELD]
    assert hashes == case_hashes(held)
    conditions = json.loads(Path(client.download_artifacts(run_id, "evaluation/conditions.json")).read_text())
    assert {k: conditions[k] for k in ("samples", "temperature", "seed", "split", "max_turns", "world_seed")} == \
        {"samples": 2, "temperature": 1.0, "seed": 0, "split": "test", "max_turns": 12, "world_seed": 0}
    saved = diag_paths(profile)["world"] / WORLD_FILE
    assert conditions["world"] == hashlib.sha256(saved.read_bytes()).hexdigest()  # the one saved world, by content
    assert any(k.startswith("reward.") for k in conditions)
    world_tags = client.get_model_version("diag-world", "1").tags
    assert world_tags["medgym.decision.against"] == "baseline" and world_tags["medgym.eval.metric"] == "consistency"

    hotter = profile.model_copy(update={"diag": profile.diag.model_copy(update={
        "evaluate": profile.diag.evaluate.model_copy(update={"temperature": 0.7})})})
    second = register_flow.fn(hotter)
    assert second["alias"] == "challenger" and client.get_model_version("diag-agent", "2").description == (
        "conditions differ (candidate vs champion v1): temperature 0.7 vs 1.0: not comparable, so no promotion")
    same = register_flow.fn(profile)
    tags = client.get_model_version("diag-agent", "3").tags
    assert same["alias"] == "challenger" and tags["medgym.decision.against"] == "champion v1"
    assert (tags["medgym.decision.shared_tasks"], tags["medgym.decision.look"], tags["medgym.decision.wins"]) == \
        (str(HELD), "1", "0")
