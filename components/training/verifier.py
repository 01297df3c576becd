"""The verifier: rows for its trainer, and scores for episodes it has never seen.

Generative (the MedAgentGym paper's): after the whole trajectory, one more user turn asks whether it is
correct; the model is trained to answer YES or NO, and scores p(YES) / (p(YES) + p(NO)) at the answer's first
token. Reward: a sequence-classification head trained with TRL's RewardTrainer on (correct, incorrect) pairs,
scored by its scalar output through a sigmoid. Either way the input is the episode's own token ids; the
checker's verdict is only ever the label.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from components.envs.episode import Episode
from components.policies.tokens import ChatTokens, episode_token_ids

QUESTION = ("Review the trajectory above. Is the submitted answer correct for the task? "
            "Answer with exactly one word: YES or NO.")
YES, NO = "YES", "NO"


def question_ids(chat: ChatTokens) -> list[int]:
    return chat.observation(QUESTION)


def answer_ids(chat: ChatTokens, word: str) -> list[int]:
    return chat.response(word) + chat.end_ids


def trainer_rows(rows: list[dict[str, Any]], tokenizer: Any, kind: Literal["generative", "reward"],
                 seed: int = 0) -> list[dict[str, Any]]:
    """Verifier dataset rows → what the method's trainer reads: SFT rows with the loss on the YES/NO answer,
    or (chosen = correct, rejected = incorrect) pairs, same task first, then across tasks."""
    chat = ChatTokens(tokenizer)
    if kind == "generative":
        q = question_ids(chat)
        out = []
        for r in rows:
            answer = answer_ids(chat, YES if r["label"] == 1 else NO)
            ids = list(r["input_ids"]) + q
            out.append({"input_ids": ids + answer, "loss_mask": [0] * len(ids) + [1] * len(answer)})
        return out
    rng = random.Random(seed)
    by_task: dict[str, dict[int, list[list[int]]]] = defaultdict(lambda: {0: [], 1: []})
    for r in rows:
        by_task[r["task_id"]][int(r["label"])].append(list(r["input_ids"]))
    pairs, spare = [], {0: [], 1: []}
    for task in sorted(by_task):
        good, bad = by_task[task][1], by_task[task][0]
        n = min(len(good), len(bad))
        pairs += list(zip(good[:n], bad[:n], strict=True))
        spare[1] += good[n:]
        spare[0] += bad[n:]
    rng.shuffle(spare[0])
    rng.shuffle(spare[1])
    pairs += list(zip(spare[1], spare[0], strict=False))
    return [{"chosen_ids": g, "rejected_ids": b} for g, b in pairs]


class VerifierScorer:
    """Scores episodes with a trained verifier checkpoint (merged or full; generative or reward)."""

    def __init__(self, model_dir: Path, kind: Literal["generative", "reward"], *, max_tokens: int = 2048,
                 dtype: str = "float32"):
        import torch
        from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

        from components.training.models import load_tokenizer

        self.kind, self.max_tokens = kind, max_tokens
        self.tokenizer = load_tokenizer(model_dir)
        self.chat = ChatTokens(self.tokenizer)
        cls = AutoModelForCausalLM if kind == "generative" else AutoModelForSequenceClassification
        self.model = cls.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
        self._yes = self.chat.content(YES)[0]
        self._no = self.chat.content(NO)[0]
        self._q = question_ids(self.chat)

    def score_ids(self, input_ids: Sequence[int]) -> float:
        import torch

        ids = list(input_ids)
        if self.kind == "generative":
            ids = ids[-(self.max_tokens - len(self._q)):] + self._q
        else:
            ids = ids[-self.max_tokens:]
        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor([ids]))
        if self.kind == "generative":
            pair = out.logits[0, -1, [self._yes, self._no]].float().softmax(-1)
            return float(pair[0])
        return float(torch.sigmoid(out.logits[0, 0].float()))

    def score(self, episodes: Sequence[Episode]) -> dict[str, float]:
        return {ep.episode_id: self.score_ids(episode_token_ids(ep, self.chat).input_ids) for ep in episodes}
