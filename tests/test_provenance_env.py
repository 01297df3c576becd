"""What a pipeline's parent run records for reproduction beyond the commit: library versions, CUDA, driver, GPU model
and count, the base checkpoint's content digest. Written to and read back from a real sqlite MLflow store."""

from __future__ import annotations

import shutil
from importlib.metadata import version

import pytest

from components.pipeline.digest import DigestCache
from components.pipeline.provenance import LIBRARIES, environment_tags
from components.profile.config import PipelineConfig
from components.tracking.reference import folder_digest
from components.tracking.tracker import MlflowTracker, TrackingConfig


def _cfg(tmp_path, base_model: str) -> PipelineConfig:
    return PipelineConfig.model_validate({
        "profile": "t", "training": {"base_model": base_model},
        "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "t",
                     "artifact_location": str(tmp_path / "artifacts")},
        "pipeline": {"state_dir": str(tmp_path / "state")}})


def _recorded(tmp_path, cfg: PipelineConfig) -> dict[str, str]:
    from mlflow.tracking import MlflowClient

    tracking: TrackingConfig = cfg.tracking
    with MlflowTracker(tracking).run("pipeline-t") as run:
        run.set_tags(environment_tags(cfg, tmp_path))
        run_id = run.run_id
    return MlflowClient(tracking_uri=tracking.mlflow_uri).get_run(run_id).data.tags


def test_the_parent_run_records_libraries_accelerator_and_the_base_checkpoint(tmp_path, tiny_model):
    base = tmp_path / "base"
    shutil.copytree(tiny_model, base)
    tags = _recorded(tmp_path, _cfg(tmp_path, str(base)))

    for name in ("torch", "transformers", "trl", "peft", "accelerate", "deepspeed", "mlflow", "prefect"):
        assert tags[f"medgym.lib.{name}"] == version(name), name
    assert set(LIBRARIES) >= {"vllm"} and tags["medgym.lib.vllm"]  # its own environment here: `absent`, or a version
    assert tags["medgym.base_model"] == str(base)
    assert tags["medgym.base_model.sha256"] == folder_digest(base) == DigestCache(tmp_path / "d.json").digest(base)

    # the digest follows the checkpoint's content: a rewritten weight file is a different base model
    (base / "config.json").write_text((base / "config.json").read_text() + "\n")
    assert _recorded(tmp_path, _cfg(tmp_path, str(base)))["medgym.base_model.sha256"] != tags["medgym.base_model.sha256"]


def test_a_machine_without_gpus_records_none(tmp_path, tiny_model):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    tags = _recorded(tmp_path, _cfg(tmp_path, str(tiny_model)))
    assert tags["medgym.gpu.count"] == "0"
    assert tags["medgym.gpu.model"] == tags["medgym.gpu.driver"] == "absent"
    assert tags["medgym.cuda"] == (torch.version.cuda or "absent") == "absent"  # the CPU build of torch


def test_a_base_model_that_is_no_folder_is_recorded_as_missing(tmp_path):
    tags = _recorded(tmp_path, _cfg(tmp_path, str(tmp_path / "nowhere")))
    assert tags["medgym.base_model.sha256"] == "missing"
