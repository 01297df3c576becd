"""The leaderboard flow with a verifier: its AUC over every finished episode and over those that submitted an
answer only, each with its 95% interval and its counts, in the markdown (written and printed), in verifier.json,
in the flow's rows (what the CLI prints and the pipeline's DVC metrics read) and in the MLflow run.

The verifier is the tiny model, a real checkpoint scoring for real (untrained: its scores are arbitrary, so the
figures are checked against the same scores put through roc_auc, not against a value)."""

from __future__ import annotations

import json

import pytest

from components.evaluation.metrics import roc_auc
from components.policies.tokens import episode_token_ids
from components.profile.config import PipelineConfig
from components.training.verifier import VerifierScorer
from tests.evaluation.test_leaderboard import _write_rollout, middling, strong, weak


@pytest.mark.timeout(600)
def test_the_board_reports_the_submitted_only_auc_beside_the_all_episode_one(tmp_path, tiny_model, capsys):
    from mlflow.tracking import MlflowClient

    from flows.evaluate import leaderboard_flow

    made = {"base": weak(), "sft": middling(), "dpo": strong()}
    dirs = {name: _write_rollout(tmp_path / "rollouts" / name, eps) for name, eps in made.items()}
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = PipelineConfig.model_validate({
        "profile": "lb", "tracking": {"mlflow_uri": uri, "artifact_location": str(tmp_path / "artifacts"),
                                      "experiment": "lb"},
        "rollouts": {n: {"out_dir": str(d)} for n, d in dirs.items()},
        "training": {"base_model": str(tiny_model)}})
    out = tmp_path / "reports"
    result = leaderboard_flow.fn(cfg, ["sft", "dpo"], baseline="base", verifier=str(tiny_model), name="lb-v",
                                 out=str(out))

    scorer = VerifierScorer(tiny_model, "generative")  # these episodes are shorter than any window
    printed = capsys.readouterr().out
    md = (out / "leaderboard.md").read_text()
    judged = json.loads((out / "verifier.json").read_text())["rollouts"]
    metrics = MlflowClient(tracking_uri=uri).get_run(result["run_id"]).data.metrics
    assert "AUC, all [95%] (n)" in md and "| submitted | AUC, submitted [95%] (n) |" in md
    for name, episodes in made.items():
        done = [e for e in episodes if e.outcome is not None]
        scores = [scorer.score_ids(episode_token_ids(e, scorer.chat).input_ids) for e in done]
        submitted = [(s, e) for s, e in zip(scores, done, strict=True) if e.submitted]
        row = result["rows"][name]["verifier"]
        assert row["episodes"] == len(done) and row["submitted"] == len(submitted)
        assert row["auc"]["value"] == pytest.approx(roc_auc(scores, [e.reward == 1.0 for e in done]))
        assert row["auc_submitted"]["value"] == pytest.approx(roc_auc([s for s, _ in submitted],
                                                                      [e.reward == 1.0 for _, e in submitted]))
        assert row["auc_submitted"]["n"] == len({e.task_id for _, e in submitted})
        assert judged[name]["auc_submitted"] == row["auc_submitted"]
        a, b = row["auc"], row["auc_submitted"]
        line = (f"| {name} | {len(done)} | {sum(e.reward == 1.0 for e in done)} | {row['accuracy']:.3f} | "
                f"{a['value']:.3f} [{a['low']:.3f}, {a['high']:.3f}] ({a['n']}) | {len(submitted)} | "
                f"{b['value']:.3f} [{b['low']:.3f}, {b['high']:.3f}] ({b['n']}) |")
        assert line in md and line in printed
        assert metrics[f"{name}.verifier.auc_submitted"] == pytest.approx(b["value"])
        assert metrics[f"{name}.verifier.auc_submitted_low"] == pytest.approx(b["low"])
    assert result["rows"]["sft"]["verifier"]["submitted"] < result["rows"]["sft"]["verifier"]["episodes"]
