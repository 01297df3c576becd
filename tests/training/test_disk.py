"""Disk of a long run: a stage's checkpoints pruned once its merged model is recorded, the model logged by reference."""

from __future__ import annotations

import pytest

from components.pipeline.digest import DigestCache
from components.pipeline.paths import init_model, stage_dirs
from components.profile.config import PipelineConfig
from components.tracking.reference import DIGEST_TAG, PATH_TAG, folder_digest
from components.training import stage
from tests.training.conftest import build_dataset, text_episodes, write_rollout
from tests.training.test_stage import config


def _cfg(tmp_path, tiny_model, keep: str, log_model: str) -> PipelineConfig:
    raw = config(tmp_path, tiny_model, write_rollout(tmp_path / "rollout", text_episodes(3))).model_dump(mode="json")
    raw["training"]["sft"]["schedule"] |= {"max_steps": 2, "save_steps": 1, "save_total_limit": 5}
    raw["training"]["checkpoints"] = {"keep": keep}
    raw["tracking"]["log_model"] = log_model
    return PipelineConfig.model_validate(raw)


@pytest.mark.timeout(600)
def test_a_two_step_stage_keeps_its_last_checkpoint_and_logs_its_model_by_reference(tmp_path, tiny_model):
    from mlflow.tracking import MlflowClient

    cfg = _cfg(tmp_path, tiny_model, keep="last", log_model="reference")
    build_dataset(cfg, "sft")
    dirs = stage_dirs(cfg, "sft")
    out = stage.run_stage(cfg, "sft", dirs, init_model(cfg, "sft"))

    assert out.result.global_step == 2
    assert sorted(p.name for p in dirs.run.glob("checkpoint-*")) == ["checkpoint-2"]
    client = MlflowClient(tracking_uri=cfg.tracking.mlflow_uri)
    run = client.get_run(out.run_id)
    assert run.data.metrics["checkpoints_pruned"] == 1

    # the run names the merged folder and its content; the pipeline's digest of the folder is the same one
    digest = folder_digest(out.model_dir)
    assert run.data.tags[PATH_TAG] == str(out.model_dir.resolve()) and run.data.tags[DIGEST_TAG] == digest
    assert DigestCache(tmp_path / "digests.json").digest(out.model_dir) == digest
    assert out.model_uri and out.model_uri.startswith("models:/")
    model = client.get_logged_model(out.model_uri.removeprefix("models:/"))
    assert model.source_run_id == out.run_id and model.tags[DIGEST_TAG] == digest
    # and copied no weights into the artifact store
    assert not [p for p in (tmp_path / "artifacts").rglob("*.safetensors")]


def test_prune_policies(tmp_path):
    def run(keep: str) -> list[str]:
        folder = tmp_path / keep
        for step in (5, 10, 40):
            (folder / f"checkpoint-{step}").mkdir(parents=True)
            (folder / f"checkpoint-{step}" / "weights").write_bytes(b"x")
        (folder / "final").mkdir()
        stage.prune_checkpoints(folder, keep)
        return sorted(p.name for p in folder.iterdir())

    assert run("all") == ["checkpoint-10", "checkpoint-40", "checkpoint-5", "final"]
    assert run("last") == ["checkpoint-40", "final"]  # by step, not by name: checkpoint-5 sorts after checkpoint-40
    assert run("none") == ["final"]
