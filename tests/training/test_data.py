"""Training data built from real teacher episodes: SFT sequences, preference pairs and verifier rows, as ids."""

from __future__ import annotations

import pytest

from components.envs.coding_env import EnvConfig
from components.envs.episode import Outcome
from components.policies.registry import PolicyConfig
from components.policies.tokens import ChatTokens, episode_token_ids
from components.rollout.collect import collect
from components.rollout.jobs import SamplingPlan
from components.rollout.runner import CollectionConfig
from components.rollout.store import load_episodes_dir
from components.training.data import (
    EmptyDatasetError,
    across_episode_pairs,
    preference_pairs,
    sft_examples,
    verifier_examples,
    verifier_ranked_pairs,
    within_episode_pairs,
)


@pytest.fixture(scope="module")
def chat(tiny_model):
    from transformers import AutoTokenizer

    return ChatTokens(AutoTokenizer.from_pretrained(tiny_model))


@pytest.fixture(scope="module")
def episodes(small_suite, tmp_path_factory):
    """Teacher episodes of the same tasks: repaired mistakes, and two-turn episodes that are right or wrong."""
    out = tmp_path_factory.mktemp("eps")
    base = {"split": "train", "limit": 8, "workers": 2, "sandbox_backend": "process"}

    def play(name: str, rate: float, turns: int, sample: int) -> list:
        collect(small_suite, out / name, CollectionConfig(
            policy=PolicyConfig(backend="scripted", options={"mistake_rate": rate}), plan=SamplingPlan(k=sample + 1),
            env=EnvConfig(max_turns=turns), **base))
        return [e for e in load_episodes_dir(out / name) if e.sample_index == sample]  # episode ids stay unique

    # mistakes repaired over several turns; and two-turn episodes (one prompt), clean or with a mistake left in
    return play("repaired", 1.0, 8, 0) + play("clean", 0.0, 2, 1) + play("cut", 1.0, 2, 2)

def test_sft_rows_are_the_correct_episodes_recorded_ids_and_train_only_the_replies(episodes, chat):
    rows = sft_examples(episodes, chat)
    correct = {e.episode_id: e for e in episodes if e.outcome == Outcome.CORRECT}
    assert {r.episode_id for r in rows} == set(correct)
    for r in rows:
        tk = episode_token_ids(correct[r.episode_id], chat)
        assert r.input_ids == tk.input_ids and r.loss_mask == tk.loss_mask
        trained = chat.tokenizer.decode([t for t, m in zip(r.input_ids, r.loss_mask, strict=True) if m])
        assert "submit_answer" in trained and correct[r.episode_id].first_observation[:60] not in trained


def test_within_episode_pairs_prefer_the_repair_over_the_failed_run_on_the_same_context(episodes, chat):
    pairs = within_episode_pairs(episodes, chat)
    assert pairs
    for p in pairs:
        ep = next(e for e in episodes if e.episode_id == p.source["episode"])
        failed, fixed = ep.turns[int(p.source["rejected_turn"])], ep.turns[int(p.source["chosen_turn"])]
        assert failed.error is not None and fixed.error is None and fixed.index > failed.index
        assert chat.tokenizer.decode(p.prompt_ids).endswith("<|im_start|>assistant\n")
        assert chat.tokenizer.decode(p.rejected_ids, skip_special_tokens=True) == failed.raw_text
        assert chat.tokenizer.decode(p.chosen_ids, skip_special_tokens=True) == fixed.raw_text


def test_across_episode_pairs_share_the_prompt_and_differ_after_it(episodes, chat):
    pairs = across_episode_pairs(episodes, chat, per_task=2)
    assert pairs
    by_id = {e.episode_id: e for e in episodes}
    for p in pairs:
        good, bad = by_id[p.source["chosen"]], by_id[p.source["rejected"]]
        assert good.task_id == bad.task_id == p.task_id
        assert good.outcome == Outcome.CORRECT and bad.outcome != Outcome.CORRECT
        assert p.prompt_ids + p.chosen_ids == episode_token_ids(good, chat).input_ids
        assert p.prompt_ids + p.rejected_ids == episode_token_ids(bad, chat).input_ids
        assert p.chosen_mask[0] == 1 and p.rejected_mask[0] == 1  # the pair starts at the first reply
    assert preference_pairs(episodes, chat) == within_episode_pairs(episodes, chat) + across_episode_pairs(episodes, chat)


def test_verifier_ranked_pairs_take_the_best_scored_correct_and_the_worst_scored_incorrect(episodes, chat):
    import random

    rng = random.Random(0)
    scores = {e.episode_id: rng.random() for e in episodes}
    pairs = verifier_ranked_pairs(episodes, chat, scores)
    assert pairs
    by_task: dict[str, list] = {}
    for e in episodes:
        by_task.setdefault(e.task_id, []).append(e)
    for p in pairs:
        eps = by_task[p.task_id]
        best = max((e for e in eps if e.outcome == Outcome.CORRECT), key=lambda e: scores[e.episode_id])
        worst = min((e for e in eps if e.outcome != Outcome.CORRECT and e.outcome != Outcome.CONTEXT_LIMIT),
                    key=lambda e: scores[e.episode_id])
        assert (p.source["chosen"], p.source["rejected"]) == (best.episode_id, worst.episode_id)
        assert p.prompt_ids + p.chosen_ids == episode_token_ids(best, chat).input_ids
    # a task whose episodes the verifier did not score makes no pair
    assert verifier_ranked_pairs(episodes, chat, {}) == []


def test_verifier_rows_are_balanced_labelled_by_the_checker_and_never_show_its_reason(episodes, chat):
    rows = verifier_examples(episodes, chat, max_tokens=100_000)
    assert sum(r.label for r in rows) * 2 == len(rows) > 0
    by_id = {e.episode_id: e for e in episodes}
    for r in rows:
        ep = by_id[r.episode_id]
        assert r.label == int(ep.outcome == Outcome.CORRECT)
        if ep.check is not None and not ep.check.correct:
            assert ep.check.grader_reason not in chat.tokenizer.decode(r.input_ids)
    assert verifier_examples(episodes, chat, max_tokens=100_000) == rows  # seeded


def test_stages_without_usable_rows_stop_with_the_reason(episodes, chat):
    wrong = [e for e in episodes if e.outcome != Outcome.CORRECT]
    with pytest.raises(EmptyDatasetError, match="none of the episodes ended correct"):
        sft_examples(wrong, chat)
    with pytest.raises(EmptyDatasetError, match="no preference pairs"):
        preference_pairs(wrong, chat)
    with pytest.raises(EmptyDatasetError, match="both classes are needed"):
        verifier_examples(wrong, chat, max_tokens=100_000)
