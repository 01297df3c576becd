"""No test task in training, checked on the episodes themselves: every Episode records its task's split, and a
training stage (SFT, DPO, the verifier, a self-improvement round) refuses a rollout folder holding an episode of
the valid or test split, or one written before episodes recorded it, in one line that names the stage, the folder,
the episode and the task. The profile's `split:` line is checked elsewhere (tests/pipeline/test_training_split.py);
here the profile says `train` and the folder holds what was really played.

The episodes are collected for real: the scripted teacher in process sandboxes on the generated small suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components.envs.coding_env import EnvConfig
from components.envs.episode import load_episodes, row_checksum
from components.policies.registry import PolicyConfig
from components.profile.config import PipelineConfig
from components.rollout.collect import collect
from components.rollout.jobs import SamplingPlan
from components.rollout.runner import CollectionConfig
from components.rollout.store import EPISODES, load_episodes_dir, shard_name, shard_paths
from components.training.stage import HeldOutEpisodeError
from tests.training.conftest import build_dataset, text_episode, write_rollout

MEDGYM = [str(Path(sys.executable).parent / "medgym")]  # the installed entry point, as a user runs it
PROFILE = "guard"


@pytest.fixture(scope="module")
def rollouts(small_suite, tmp_path_factory) -> dict[str, Path]:
    """The teacher's episodes of the train split and of the test split, each in its own rollout folder; mistakes,
    some left unrepaired, so that SFT, DPO and the verifier all have data."""
    root = tmp_path_factory.mktemp("rollouts")
    teacher = PolicyConfig(backend="scripted", options={"mistake_rate": 1.0, "unrepaired_rate": 0.5})
    out = {}
    for split, limit in (("train", 4), ("test", 2)):
        config = CollectionConfig(policy=teacher, plan=SamplingPlan(k=2), split=split, limit=limit, workers=2,
                                  sandbox_backend="process", env=EnvConfig(max_turns=8))
        result = collect(small_suite, root / split, config)
        assert result.failed == 0 and not result.refused, result.errors
        out[split] = root / split
    return out


def profile(tmp_path: Path, tiny_model: Path, folders: dict[str, Path]) -> dict:
    """A profile whose every rollout says it plays the train split, and whose stages read them all."""
    names = list(folders)
    schedule = {"max_steps": 1, "batch_size": 1, "max_length": 2048}
    return {
        "profile": PROFILE,
        "data": {"out_dir": str(tmp_path / "suite")},
        "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
                     "artifact_location": str(tmp_path / "artifacts"), "experiment": PROFILE},
        "rollouts": {name: {"out_dir": str(folder), "split": "train", "policy": {"backend": "scripted"}}
                     for name, folder in folders.items()},
        "training": {"base_model": str(tiny_model), "out_dir": str(tmp_path / "models"),
                     "data_dir": str(tmp_path / "datasets"),
                     "sft": {"episodes": names, "schedule": schedule},
                     "dpo": {"episodes": names, "schedule": schedule},
                     "verifier": {"episodes": names, "max_tokens": 2048, "schedule": schedule}},
    }


def config(tmp_path: Path, tiny_model: Path, folders: dict[str, Path]) -> PipelineConfig:
    return PipelineConfig.model_validate(profile(tmp_path, tiny_model, folders))


def refusal(folder: Path, method: str, stage_name: str, problem: str) -> str:
    """The one-line message for `folder`, naming its first episode and task and counting the others."""
    eps = load_episodes_dir(folder).episodes
    more = f" (and {len(eps) - 1} more)" if len(eps) > 1 else ""
    return (f"{folder}, field 'split': the {method} stage {stage_name!r} of profile {PROFILE} trains on train "
            f"episodes only, and episode {eps[0].episode_id!r} of task {eps[0].task_id!r}{more} {problem}")


def legacy_rollout(source: Path, out: Path) -> Path:
    """`source`'s episodes as a rollout written before episodes recorded their split: the field is absent from each
    line and the line's checksum is the one it had then."""
    rows = [json.loads(line) for line in shard_paths(source)[0].read_text().splitlines()]
    for row in rows:
        del row["split"]
        row["checksum"] = row_checksum(row)
    (out / EPISODES).mkdir(parents=True)
    (out / EPISODES / shard_name(0)).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def test_collected_episodes_record_their_split_on_disk_and_reload_it(rollouts):
    for split, folder in rollouts.items():
        lines = [json.loads(line) for p in shard_paths(folder) for line in p.read_text().splitlines()]
        assert lines and {row["split"] for row in lines} == {split}
        assert {e.split for e in load_episodes_dir(folder)} == {split}
        assert {e.split for e in load_episodes(shard_paths(folder)[0])} == {split}


@pytest.mark.parametrize(("method", "stage_name"), [("sft", None), ("dpo", "round1-dpo"), ("verifier", None)])
def test_a_stage_fed_test_episodes_is_refused_naming_the_stage_folder_episode_and_task(tmp_path, tiny_model, rollouts,
                                                                                       method, stage_name):
    cfg = config(tmp_path, tiny_model, {"teacher": rollouts["train"], "held": rollouts["test"]})
    with pytest.raises(HeldOutEpisodeError) as err:
        build_dataset(cfg, method, stage_name)
    assert str(err.value) == refusal(rollouts["test"], method, stage_name or method, "is from the 'test' split")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "datasets").exists()


def test_a_stage_fed_valid_episodes_is_refused(tmp_path, tiny_model):
    folder = write_rollout(tmp_path / "valid", [text_episode(t, s, s == 0, split="valid") for t in range(2) for s in range(2)])
    cfg = config(tmp_path, tiny_model, {"held": folder})
    with pytest.raises(HeldOutEpisodeError) as err:
        build_dataset(cfg, "sft")
    assert str(err.value) == refusal(folder, "sft", "sft", "is from the 'valid' split")


@pytest.mark.parametrize("method", ["sft", "dpo", "verifier"])
def test_train_episodes_build_every_stage_dataset(tmp_path, tiny_model, rollouts, method):
    cfg = config(tmp_path, tiny_model, {"teacher": rollouts["train"]})
    manifest = build_dataset(cfg, method)
    assert manifest.rows > 0 and [s.path for s in manifest.sources] == [str(rollouts["train"])]


def test_a_legacy_episode_without_a_split_loads_as_none_and_training_refuses_it(tmp_path, tiny_model, rollouts):
    folder = legacy_rollout(rollouts["train"], tmp_path / "old")
    assert '"split"' not in (folder / EPISODES / shard_name(0)).read_text()
    loaded = load_episodes_dir(folder, strict=True).episodes  # the old checksums still hold
    assert len(loaded) == len(load_episodes_dir(rollouts["train"]).episodes)
    assert {e.split for e in loaded} == {e.split for e in load_episodes(folder / EPISODES / shard_name(0))} == {None}

    cfg = config(tmp_path, tiny_model, {"old": folder})
    with pytest.raises(HeldOutEpisodeError) as err:
        build_dataset(cfg, "verifier")
    assert str(err.value) == refusal(folder, "verifier", "verifier", (
        "records no split: it predates split recording, so rollout 'old' must be collected again"))


def test_medgym_train_data_refuses_test_episodes_in_one_line(tmp_path, tiny_model, rollouts):
    path = tmp_path / "profile.yaml"
    raw = profile(tmp_path, tiny_model, {"teacher": rollouts["train"], "held": rollouts["test"]})
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.run([*MEDGYM, "train", "data", "dpo", "--config", str(path)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 2, proc.stderr[-4000:]
    expected = refusal(rollouts["test"], "dpo", "dpo", "is from the 'test' split")
    assert proc.stderr.splitlines() == [f"error: {expected}"], proc.stderr[-4000:]  # no traceback
    assert proc.stdout == "" and not (tmp_path / "datasets").exists()
