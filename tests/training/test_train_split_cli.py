"""`medgym train sft|dpo|verifier` and `medgym train data`, through the installed entry point: a profile whose stage
would train on a rollout of the valid or test split, or of every split (no `split:` line), is refused in one line
that names the profile file, the stage and the rollout, before a dataset is built, a server started or a run
tracked. The rollout holds real episodes, so without the check they would be trained on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.training.conftest import text_episodes, write_rollout

MEDGYM = [str(Path(sys.executable).parent / "medgym")]  # the installed entry point, as a user runs it


def _profile(tmp_path: Path, tiny_model: Path, method: str, split: str | None) -> Path:
    held = {"policy": {"backend": "scripted"}, "out_dir": str(write_rollout(tmp_path / "held", text_episodes(4)))}
    if split is not None:
        held["split"] = split
    raw = {"profile": "split-cli",
           "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
                        "artifact_location": str(tmp_path / "artifacts"), "experiment": "split-cli"},
           "rollouts": {"held": held},
           "training": {"base_model": str(tiny_model), "data_dir": str(tmp_path / "datasets"),
                        "out_dir": str(tmp_path / "models"),
                        method: {"episodes": ["held"], "init": "base", "schedule": {"max_steps": 1, "batch_size": 1}}}}
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def _medgym(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "NO_PROXY": "127.0.0.1,localhost"}
    env.pop("PREFECT_API_URL", None)
    return subprocess.run([*MEDGYM, *args], capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.parametrize(("command", "method", "split", "plays"), [
    (["sft"], "sft", None, "every split (it sets no split)"),
    (["dpo"], "dpo", "test", "split 'test'"),
    (["verifier"], "verifier", "valid", "split 'valid'"),
    (["data", "sft"], "sft", "test", "split 'test'"),
], ids=["sft-no-split", "dpo-test", "verifier-valid", "data-test"])
def test_training_on_held_out_episodes_is_refused_in_one_line_before_anything_runs(tmp_path, tiny_model, command,
                                                                                   method, split, plays):
    path = _profile(tmp_path, tiny_model, method, split)
    proc = _medgym(tmp_path, "train", *command, "--config", str(path))
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert proc.stderr.splitlines() == [(
        f"error: {path.resolve()}: training.{method} reads rollouts.held, which plays {plays}: training reads train "
        "episodes only (set rollouts.held.split: train)")], proc.stderr[-4000:]  # no server started, no traceback
    assert proc.stdout == ""
    assert not (tmp_path / "datasets").exists() and not (tmp_path / "models").exists()
    assert not (tmp_path / "mlflow.db").exists()  # no MLflow run was started


def test_the_same_profile_on_the_train_split_builds_its_dataset(tmp_path, tiny_model):
    path = _profile(tmp_path, tiny_model, "sft", "train")
    proc = _medgym(tmp_path, "train", "data", "sft", "--config", str(path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "datasets" / "split-cli" / "sft" / "manifest.json").is_file()
