"""The verifier never scores an episode it trained on. DPO ranks pairs, and SFT rejection-samples, by its scores: an
episode among its training rows would be scored by a model that learnt its label, so it is never scored, ranks no
pair, and (SFT) is kept on the checker's verdict alone; the dataset's manifest counts both.

Two rollouts of the same train tasks share episode ids (`<task>#<sample>`), as the demo's teacher and sft_train do:
the verifier's rows are matched to episodes by their token ids, so the teacher's `t#0` is not taken for the
sft_train `t#0` it trained on. The verifier dataset is written by the real builder and the verifier checkpoint is
the tiny model (a real one, untrained: its scores are arbitrary, which none of these checks depends on)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from components.common.io import RecordError
from components.envs.episode import Episode
from components.pipeline.paths import dataset_dir, merged_dir, stage_dirs
from components.policies.tokens import episode_token_ids
from components.profile.config import PipelineConfig
from components.training import stage
from components.training.datasets import read_dataset
from tests.training.conftest import build_dataset, text_episode, write_rollout

TASKS = 4


def teacher() -> list[Episode]:
    return [text_episode(t, s, s == 0) for t in range(TASKS) for s in range(2)]


def sft_train() -> list[Episode]:
    """The same tasks and ids as the teacher's (and a third sample), played differently after the same prompt: a
    correct sample 0 and two wrong ones, so that the balanced verifier dataset takes every correct one and half the
    wrong ones."""
    out = []
    for t in range(TASKS):
        for s in range(3):
            ep = text_episode(t, s, s == 0)
            first = ep.turns[0].model_copy(update={"observation": ep.turns[0].observation + f" (run {s})"})
            out.append(ep.model_copy(update={"turns": [first, *ep.turns[1:]]}))
    return out


def config(tmp_path: Path, tiny_model: Path, **training) -> PipelineConfig:
    schedule = {"max_steps": 1, "batch_size": 1, "max_length": 1024}
    return PipelineConfig.model_validate({
        "profile": "t",
        "data": {"out_dir": str(tmp_path / "suite")},
        "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "artifact_location": str(tmp_path / "a"),
                     "experiment": "t"},
        "rollouts": {name: {"out_dir": str(tmp_path / name)} for name in ("teacher", "sft_train")},
        "training": {"base_model": str(tiny_model), "out_dir": str(tmp_path / "models"),
                     "data_dir": str(tmp_path / "datasets"),
                     "verifier": {"episodes": ["sft_train"], "schedule": schedule},
                     "dpo": {"episodes": ["teacher", "sft_train"], "verifier_pairs": True, "schedule": schedule},
                     **training},
    })


@pytest.fixture()
def trained(tmp_path, tiny_model, monkeypatch):
    """Makes a profile whose verifier stage has run: its dataset built from sft_train, its checkpoint in place (the
    marker names that dataset, as run_stage writes it). Gives the profile, the token ids of the verifier's rows, the
    ids of the episodes they are (`sft_train/<id>`), and a record of every episode verifier_scores is given."""
    def profile(**training) -> tuple[PipelineConfig, set[tuple[int, ...]], set[str], list[Episode]]:
        cfg = config(tmp_path, tiny_model, **training)
        write_rollout(tmp_path / "teacher", teacher())
        write_rollout(tmp_path / "sft_train", sft_train())
        manifest = build_dataset(cfg, "verifier")
        merged = merged_dir(cfg, "verifier")
        shutil.copytree(tiny_model, merged)
        (merged / "medgym_stage.json").write_text(json.dumps({"method": "verifier", "dataset": manifest.content_hash}))
        rows = read_dataset(dataset_dir(cfg, "verifier"))[1]
        return cfg, {tuple(r["input_ids"]) for r in rows}, {f"sft_train/{r['episode_id']}" for r in rows}, scored

    scored: list[Episode] = []
    real = stage.verifier_scores

    def recording(cfg, verifier, episodes, needed_by="verifier scores"):
        scored.extend(episodes)
        return real(cfg, verifier, episodes, needed_by)

    monkeypatch.setattr(stage, "verifier_scores", recording)
    return profile


def inputs(episodes: list[Episode], chat) -> set[tuple[int, ...]]:
    return {tuple(episode_token_ids(e, chat).input_ids) for e in episodes}


def test_dpo_ranks_only_episodes_the_verifier_never_trained_on(trained, tiny_chat):
    cfg, rows, seen, scored = trained()
    assert len(rows) == len(seen) == 2 * TASKS  # every correct sft_train episode and as many wrong ones

    manifest = build_dataset(cfg, "dpo")
    assert scored and not inputs(scored, tiny_chat) & rows  # verifier_scores never saw an episode it trained on
    ids = [e.episode_id for e in scored]
    # held out: the teacher's 8 and the 4 wrong sft_train ones left out of the verifier's rows; every task is mixed
    assert len(ids) == 2 * TASKS + TASKS and not set(ids) & seen
    assert {i.split("/")[0] for i in ids} == {"teacher", "sft_train"}  # ids that name their rollout
    hash_ = read_dataset(dataset_dir(cfg, "verifier"))[0].content_hash
    assert manifest.settings["verifier_scoring"] == {"verifier_dataset": hash_, "scored": len(ids), "trained_on": len(seen)}
    ranked = [r for r in read_dataset(dataset_dir(cfg, "dpo"))[1] if r["kind"] == "verifier_ranked"]
    assert len(ranked) == TASKS
    for r in ranked:
        assert {r["source"]["chosen"], r["source"]["rejected"]} <= set(ids)

    judged = stage.judge_episodes(cfg, "dpo", {"teacher": teacher(), "sft_train": sft_train()}, tiny_chat,
                                  stage_dirs(cfg, "verifier"))
    assert judged.trained_on == seen  # by content: the teacher's episodes of the same ids are not among them
    assert set(judged.scores) == set(ids)


def test_sft_keeps_the_correct_episodes_the_verifier_trained_on_unscored(trained):
    # a threshold no score reaches: every scored episode is rejected, so what is left is what was never scored
    cfg, _, seen, scored = trained(sft={"episodes": ["teacher", "sft_train"], "min_verifier_score": 1.0})
    manifest = build_dataset(cfg, "sft")
    assert sorted(e.episode_id for e in scored) == sorted(f"teacher/{e.episode_id}" for e in teacher() if e.reward == 1.0)
    rows = read_dataset(dataset_dir(cfg, "sft"))[1]
    assert sorted(r["episode_id"] for r in rows) == sorted(f"sft_train/{e.episode_id}" for e in sft_train()
                                                           if e.reward == 1.0)
    assert {r["episode_id"] for r in rows} <= seen
    assert manifest.settings["verifier_scoring"]["scored"] == TASKS
    assert manifest.settings["verifier_scoring"]["trained_on"] == TASKS  # the correct ones kept unscored


def test_a_verifier_dataset_rebuilt_after_training_is_refused_by_name(trained):
    cfg, _, _, scored = trained()
    marker = merged_dir(cfg, "verifier") / "medgym_stage.json"
    marker.write_text(json.dumps({"method": "verifier", "dataset": "0" * 64}))
    with pytest.raises(RecordError, match=r"medgym_stage.json, field 'dataset': the verifier trained on dataset "
                                          r"000000000000…, and .* holds .*: which episodes it trained on is unknown"):
        build_dataset(cfg, "dpo")
    assert not scored
