"""The verifier reads one window in training and in scoring: an episode's last `verifier_budget` tokens, then the
question, then (in training) the YES/NO answer, all within the trainer's max_length. A longer episode is left out
of its dataset rather than cut by the trainer's truncation, which would drop the answer the loss is on.

Real pieces throughout: the tiny model's SmolLM2 tokenizer, the dataset builder writing to disk, the trainer's row
builder, and the tiny model itself as the verifier checkpoint that scores."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from components.envs.episode import Episode
from components.pipeline.paths import dataset_dir, merged_dir, stage_dirs
from components.policies.tokens import episode_token_ids
from components.profile.config import PipelineConfig
from components.training import stage
from components.training.config import VerifierSettings
from components.training.datasets import read_dataset
from components.training.verifier import NO, YES, VerifierScorer, answer_ids, question_ids, trainer_rows
from tests.training.conftest import build_dataset, text_episode, write_rollout


def long_failed_episode(sentences: int) -> Episode:
    """A wrong episode whose prompt is padded with `sentences` sentences."""
    ep = text_episode(9, 1, correct=False)
    return ep.model_copy(update={"first_observation": ep.first_observation + " The patient is stable." * sentences})


def config(tmp_path: Path, tiny_model: Path, window: int) -> PipelineConfig:
    """A profile whose verifier reads `window` tokens (max_tokens and schedule.max_length alike, as the profiles
    set them)."""
    return PipelineConfig.model_validate({
        "profile": "t",
        "data": {"out_dir": str(tmp_path / "suite")},
        "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "artifact_location": str(tmp_path / "a"),
                     "experiment": "t"},
        "rollouts": {"teacher": {"out_dir": str(tmp_path / "rollout")}},
        "training": {"base_model": str(tiny_model), "out_dir": str(tmp_path / "models"),
                     "data_dir": str(tmp_path / "datasets"),
                     "verifier": {"episodes": ["teacher"], "max_tokens": window,
                                  "schedule": {"max_steps": 1, "max_length": window}}},
    })


@pytest.fixture(scope="module")
def tail(tiny_chat) -> tuple[int, int]:
    """(question ids, the longer answer's ids) as the generative rows append them."""
    return len(question_ids(tiny_chat)), max(len(answer_ids(tiny_chat, w)) for w in (YES, NO))


@pytest.fixture()
def between(tmp_path, tiny_model, tiny_chat, tail):
    """A profile, and a long failed episode whose length lies between the verifier's budget and max_tokens."""
    short = [text_episode(t, s, s == 0) for t in range(4) for s in range(2)] + [text_episode(5, 0, True)]
    long_ep = long_failed_episode(40)
    length = len(episode_token_ids(long_ep, tiny_chat).input_ids)
    q, a = tail
    assert length > max(len(episode_token_ids(e, tiny_chat).input_ids) for e in short) + q + a
    # it fits max_tokens, and its budget (max_tokens - q - a) falls short of it
    cfg = config(tmp_path, tiny_model, window=length + 1)
    write_rollout(tmp_path / "rollout", [*short, long_ep])
    return cfg, long_ep


def test_the_budget_leaves_room_for_the_question_and_the_longer_answer(tiny_chat, tail):
    q, a = tail
    settings = VerifierSettings(max_tokens=4096, schedule={"max_length": 2048})
    assert stage.verifier_budget(settings, tiny_chat) == 2048 - q - a  # the smaller of the two windows
    reward = VerifierSettings(kind="reward", max_tokens=1000, schedule={"max_length": 2048})
    assert stage.verifier_budget(reward, tiny_chat) == 1000  # a reward row is the episode alone
    with pytest.raises(ValueError, match=r"training.verifier: a window of 30 tokens .* leaves no room"):
        stage.verifier_budget(VerifierSettings(max_tokens=30, schedule={"max_length": 30}), tiny_chat)


def test_an_episode_between_the_budget_and_max_tokens_is_left_out_so_every_answer_fits(between, tiny_tokenizer,
                                                                                       tiny_chat):
    cfg, long_ep = between
    window = cfg.training.verifier.schedule.max_length
    uncut = episode_token_ids(long_ep, tiny_chat).input_ids + question_ids(tiny_chat) + answer_ids(tiny_chat, NO)
    assert len(uncut) > window  # its row, were it kept: the trainer's truncation would cut the answer off
    manifest = build_dataset(cfg, "verifier")
    _, rows = read_dataset(dataset_dir(cfg, "verifier"))
    assert long_ep.episode_id not in {r["episode_id"] for r in rows}
    assert manifest.stats["labels"] == {"0": 4, "1": 4}  # balanced over the episodes that fit
    for src, row in zip(rows, trainer_rows(rows, tiny_tokenizer, "generative"), strict=True):
        assert len(row["input_ids"]) <= window  # nothing for the trainer's truncation to cut
        answer = tiny_tokenizer.decode([t for t, m in zip(row["input_ids"], row["loss_mask"], strict=True) if m])
        assert answer == ("YES" if src["label"] == 1 else "NO") + tiny_tokenizer.eos_token


def test_every_scorer_reads_the_window_the_verifier_trained_on(between, tiny_model, tiny_chat, tail):
    from flows.evaluate import _verifier

    cfg, long_ep = between
    settings = cfg.training.verifier
    q, a = tail
    budget = settings.max_tokens - q - a
    shutil.copytree(tiny_model, merged_dir(cfg, "verifier"))
    # as DPO and SFT rejection sampling score
    scored = stage.verifier_scores(cfg, stage_dirs(cfg, "verifier"), [long_ep])[long_ep.episode_id]
    ids = episode_token_ids(long_ep, tiny_chat).input_ids
    plain = VerifierScorer(tiny_model, "generative", max_tokens=10_000)
    assert scored == pytest.approx(plain.score_ids(ids[-budget:]), abs=1e-6)  # the last `budget` tokens, then q
    assert scored != pytest.approx(plain.score_ids(ids[-(settings.max_tokens - q):]), abs=1e-6)  # not a wider one

    assert stage.verifier_budget(settings, tiny_chat) == budget
    assert stage.verifier_scorer(tiny_model, settings).max_tokens == budget + q
    assert _verifier(cfg, str(tiny_model), "generative").max_tokens == budget + q  # the evaluation's AUC and best@k
