"""Batched verifier scoring gives what scoring each episode alone through the model's own full forward gives.

Right padding under causal attention leaves every real position exact, and only the last position meets the head;
these tests hold the batched scorer to a plain `model(input_ids)` per sequence (the scorer before batching) on a
real checkpoint, for both verifier kinds, across batch budgets that put one, some or all sequences in a batch."""

from __future__ import annotations

import random

import pytest
import torch

from components.training.verifier import VerifierScorer, _batches


def _sequences(n: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(10, vocab) for _ in range(rng.randrange(3, 90))] for _ in range(n)]


def _plain(model, ids: list[int], kind: str, yes_no: tuple[int, int] = (0, 0)) -> float:
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids])).logits
    if kind == "generative":
        return float(logits[0, -1, list(yes_no)].float().softmax(-1)[0])
    return float(torch.sigmoid(logits[0, 0].float()))


@pytest.mark.parametrize("budget", [1, 200, 100_000])
def test_generative_scores_in_batches_equal_one_plain_forward_each(tiny_model, budget):
    scorer = VerifierScorer(tiny_model, "generative", max_tokens=64, dtype="float32", batch_tokens=budget)
    seqs = _sequences(12, scorer.tokenizer.vocab_size)
    got = scorer.score_many(seqs)
    yes_no = (scorer.chat.content("YES")[0], scorer.chat.content("NO")[0])
    # the window: long episodes keep their last tokens before the question, exactly as before batching
    want = [_plain(scorer.model, scorer.window(s), "generative", yes_no) for s in seqs]
    assert any(len(s) > 64 for s in seqs)
    assert got == pytest.approx(want, abs=1e-5)
    assert got == pytest.approx(scorer.score_many(list(reversed(seqs)))[::-1], abs=1e-5)  # order-free


def test_reward_scores_in_batches_equal_one_plain_forward_each(tiny_model, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model, num_labels=1)
    model.save_pretrained(tmp_path / "rm")
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(tmp_path / "rm")
    scorer = VerifierScorer(tmp_path / "rm", "reward", max_tokens=64, dtype="float32", batch_tokens=300)
    seqs = _sequences(9, scorer.tokenizer.vocab_size, seed=1)
    want = [_plain(scorer.model, scorer.window(s), "reward") for s in seqs]
    assert scorer.score_many(seqs) == pytest.approx(want, abs=1e-5)


def test_bf16_scores_keep_float32s_order(tiny_model):
    seqs = _sequences(16, 2000, seed=2)
    exact = VerifierScorer(tiny_model, "generative", dtype="float32").score_many(seqs)
    fast = VerifierScorer(tiny_model, "generative", dtype="bfloat16").score_many(seqs)
    assert fast == pytest.approx(exact, abs=0.02)


def test_batches_stay_within_the_padded_budget_and_keep_every_index_once():
    lengths = sorted(random.Random(3).randrange(1, 50) for _ in range(40))
    batches = _batches(lengths, 120)
    assert [i for b in batches for i in b] == list(range(40))
    for b in batches:
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 120
    assert _batches([500, 600], 100) == [[0], [1]]  # longer than the budget: alone, never dropped
