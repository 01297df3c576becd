"""A training stage end to end: rollout folder → dataset on disk → training → merged model, in one MLflow run."""

from __future__ import annotations

import json

import pytest

from components.pipeline.paths import dataset_dir, init_model, merged_dir, stage_dirs
from components.profile.config import PipelineConfig
from components.training import stage
from components.training.data import EmptyDatasetError
from components.training.datasets import read_dataset
from components.training.models import ADAPTER_FILE
from tests.training.conftest import build_dataset, text_episodes, write_rollout

STEPS = 3


def config(tmp_path, tiny_model, rollout) -> PipelineConfig:
    schedule = {"max_steps": STEPS, "batch_size": 1, "max_length": 512, "logging_steps": 1, "save_steps": 100,
                "learning_rate": 1e-3, "warmup_ratio": 0.0, "precision": "fp32"}
    lora = {"r": 4, "alpha": 8, "dropout": 0.0}
    return PipelineConfig.model_validate({
        "profile": "t",
        "data": {"out_dir": str(tmp_path / "suite")},
        "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
                     "artifact_location": str(tmp_path / "artifacts"), "experiment": "t"},
        "rollouts": {"teacher": {"out_dir": str(rollout)}},
        "training": {"base_model": str(tiny_model), "out_dir": str(tmp_path / "models"),
                     "data_dir": str(tmp_path / "datasets"),
                     "sft": {"episodes": ["teacher"], "init": "base", "packing": False, "schedule": schedule,
                             "lora": lora},
                     "verifier": {"episodes": ["teacher"], "init": "base", "schedule": schedule, "lora": lora}},
    })


@pytest.mark.timeout(600)
def test_sft_stage_builds_its_dataset_trains_merges_and_tracks_one_mlflow_run(tmp_path, tiny_model):
    from mlflow.tracking import MlflowClient

    import mlflow

    episodes = text_episodes(3)
    cfg = config(tmp_path, tiny_model, write_rollout(tmp_path / "rollout", episodes))
    manifest = build_dataset(cfg, "sft")
    assert manifest.kind == "sft" and manifest.rows == sum(e.reward == 1.0 for e in episodes) == 3
    assert read_dataset(dataset_dir(cfg, "sft"))[0] == manifest
    assert manifest.sources[0].path == str(tmp_path / "rollout")

    out = stage.run_stage(cfg, "sft", stage_dirs(cfg, "sft"), init_model(cfg, "sft"))
    assert out.result.global_step == STEPS and out.model_dir == merged_dir(cfg, "sft")
    assert (out.model_dir / "model.safetensors").is_file() and not (out.model_dir / ADAPTER_FILE).exists()
    curve = json.loads((out.model_dir / "train_loss.json").read_text())  # the series DVC plots
    assert [r["step"] for r in curve] == list(range(1, STEPS + 1)) and all(r["loss"] > 0 for r in curve)
    marker = json.loads((out.model_dir / "medgym_stage.json").read_text())
    assert marker == {"method": "sft", "stage": "sft", "kind": "causal", "run_id": out.run_id, "dataset": manifest.content_hash,
                      "init": str(tiny_model)}

    client = MlflowClient(tracking_uri=cfg.tracking.mlflow_uri)
    run = client.get_run(out.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "t-sft"
    params = run.data.params
    assert params["method"] == "sft" and params["base_model"] == str(tiny_model)
    assert params["schedule.max_steps"] == str(STEPS) and params["lora.r"] == "4" and params["packing"] == "False"
    assert run.data.tags["medgym.stage"] == "sft" and run.data.tags["medgym.profile"] == "t"
    loss = client.get_metric_history(out.run_id, "loss")
    assert sorted(m.step for m in loss) == list(range(1, STEPS + 1))
    assert run.data.metrics["global_step"] == STEPS and run.data.metrics["train_tokens"] == out.result.tokens > 0
    assert [k for k in run.data.metrics if k.startswith("system/")], sorted(run.data.metrics)

    inputs = run.inputs.dataset_inputs
    assert len(inputs) == 1
    ds = inputs[0].dataset
    assert len(ds.digest) >= 12 and manifest.content_hash.startswith(ds.digest)
    assert {t.key: t.value for t in inputs[0].tags}.get("content_hash") == manifest.content_hash

    assert out.model_uri
    pipe = mlflow.transformers.load_model(out.model_uri)
    assert pipe.task == "text-generation"
    generated = pipe("Compute the BMI", max_new_tokens=5, do_sample=False)
    assert isinstance(generated[0]["generated_text"], str) and generated[0]["generated_text"].startswith("Compute")


def test_verifier_stage_over_only_correct_episodes_says_both_classes_are_needed_and_writes_nothing(
        tmp_path, tiny_model):
    cfg = config(tmp_path, tiny_model, write_rollout(tmp_path / "rollout", text_episodes(2, correct_only=True)))
    with pytest.raises(EmptyDatasetError, match="both classes are needed") as err:
        build_dataset(cfg, "verifier")
    assert "verifier stage of profile t" in str(err.value)
    target = dataset_dir(cfg, "verifier")
    assert not target.exists()
    assert not target.parent.exists() or not list(target.parent.iterdir())  # no temporary folder left either


def test_a_stage_reads_only_the_settings_its_protocol_names_in_the_folders_it_is_given(tmp_path, tiny_model):
    """The engine takes any TrainingProfile and the folders it is told: the same dataset comes from the three
    settings alone, written where StageDirs says, as from the profile in the pipeline's layout."""
    from dataclasses import dataclass

    cfg = config(tmp_path, tiny_model, write_rollout(tmp_path / "rollout", text_episodes(3)))

    @dataclass
    class Settings:
        profile: str
        training: object
        tracking: object

    alone = Settings("t", cfg.training, cfg.tracking)
    dirs = stage.StageDirs("sft", tmp_path / "alone" / "data", tmp_path / "alone" / "run",
                           tmp_path / "alone" / "merged", {"teacher": tmp_path / "rollout"})
    manifest = stage.build_dataset(alone, "sft", dirs)
    assert manifest.content_hash == build_dataset(cfg, "sft").content_hash
    assert read_dataset(tmp_path / "alone" / "data")[0] == manifest
