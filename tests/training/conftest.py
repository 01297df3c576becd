"""Shared pieces of the training tests: short text episodes (two turns, right or wrong) and their chat tokens.

The episodes are built by hand rather than played, so that trainer tests need no sandbox: they are the shape a
scripted teacher writes (a code run, then a submission), tokenized by the real `episode_token_ids`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.envs.actions import RunCode, SubmitAnswer
from components.envs.episode import Check, Episode, Outcome, PolicyInfo, Turn


def text_episode(task: int, sample: int, correct: bool, split: str | None = "train") -> Episode:
    """A finished two-turn episode of task `task` (of `split`) whose outcome, reward, check and turns agree."""
    answer = 20.0 + task + (0 if correct else 5)
    code = "w = 1.7\n" * (task % 3) + f"print({70 + task} / 1.7**2)"  # episodes of a few different lengths
    turns = [
        Turn(index=0, raw_text=f"```python\n{code}\n```", action=RunCode(code=code), observation=f"{answer:.2f}"),
        Turn(index=1, raw_text=json.dumps({"type": "submit_answer", "answer": answer}),
             action=SubmitAnswer(answer=answer), observation="correct" if correct else "incorrect"),
    ]
    task_id = f"synthetic_medcalc/bmi/{task}"
    return Episode(episode_id=f"{task_id}#{sample}", task_id=task_id, sample_index=sample, dataset="synthetic_medcalc",
                   domain="medcalc", split=split, system_prompt="You are a careful clinical data scientist.",
                   first_observation=f"Compute the BMI of a {70 + task} kg, 1.70 m patient.", turns=turns,
                   submitted=True, submitted_answer=answer, check=Check(correct=correct, grader_reason="hidden"),
                   reward=1.0 if correct else 0.0, outcome=Outcome.CORRECT if correct else Outcome.WRONG_ANSWER,
                   policy=PolicyInfo(backend="scripted", model="fixed"), duration_s=0.5)


def build_dataset(cfg, method: str, stage: str | None = None):
    """The stage's dataset, built in the profile's folders as `medgym train` builds it (flows/training.py)."""
    from components.pipeline.paths import stage_dirs
    from components.training.stage import build_dataset as build

    return build(cfg, method, stage_dirs(cfg, method, stage), stage_dirs(cfg, "verifier"))


def text_episodes(tasks: int = 4, correct_only: bool = False) -> list[Episode]:
    """Per task, sample 0 correct and sample 1 wrong (or correct too, with `correct_only`)."""
    return [text_episode(t, s, correct_only or s == 0) for t in range(tasks) for s in range(2)]


def write_rollout(out_dir: Path, episodes: list[Episode]) -> Path:
    """The episodes as a rollout folder (shards written by the real EpisodeStore)."""
    from components.rollout.store import EpisodeStore

    with EpisodeStore(out_dir) as store:
        store.commit(episodes)
    return out_dir


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


@pytest.fixture(scope="session")
def tiny_chat(tiny_tokenizer):
    from components.policies.tokens import ChatTokens

    return ChatTokens(tiny_tokenizer)
