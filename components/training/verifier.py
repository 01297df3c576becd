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
    """Scores episodes with a trained verifier checkpoint (merged or full; generative or reward), in batches.

    Episodes are sorted by length and cut into batches of at most `batch_tokens` padded tokens, padded on the
    right: under causal attention a real token never sees the padding after it, so each row's last real position
    holds exactly what scoring it alone would. Only that position's hidden state meets the head, and the head runs
    in float32 on those rows alone: the vocabulary-wide logits of every position (most of the cost and memory of a
    plain forward) are never formed, and a bf16 body (`dtype: auto` where the device computes bf16 fast) still
    gives YES/NO probabilities as fine as float32's."""

    def __init__(self, model_dir: Path, kind: Literal["generative", "reward"], *, max_tokens: int = 2048,
                 dtype: str = "auto", batch_tokens: int = 16_384, device: str | None = None):
        import torch
        from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

        from components.training.models import bf16_supported, load_tokenizer

        if batch_tokens < 1:
            raise ValueError(f"batch_tokens must be positive, not {batch_tokens}")
        self.kind, self.max_tokens, self.batch_tokens = kind, max_tokens, batch_tokens
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if dtype == "auto":
            dtype = "bfloat16" if bf16_supported() else "float32"
        self.dtype = dtype
        self.tokenizer = load_tokenizer(model_dir)
        self.chat = ChatTokens(self.tokenizer)
        cls = AutoModelForCausalLM if kind == "generative" else AutoModelForSequenceClassification
        self.model = cls.from_pretrained(model_dir, dtype=getattr(torch, dtype)).to(self.device).eval()
        self._q = question_ids(self.chat)
        if kind == "generative":
            yes, no = self.chat.content(YES)[0], self.chat.content(NO)[0]
            self._head = self.model.get_output_embeddings().weight[[yes, no]].detach().float()  # (2, hidden)
        else:
            score = self.model.score
            self._head = score.weight.detach().float()  # (1, hidden)
            self._bias = None if score.bias is None else score.bias.detach().float()

    def window(self, input_ids: Sequence[int]) -> list[int]:
        """What the verifier reads of an episode: its last tokens that fit, then (generative) the question."""
        ids = list(input_ids)
        if self.kind == "generative":
            return ids[-(self.max_tokens - len(self._q)):] + self._q
        return ids[-self.max_tokens:]

    def score_ids(self, input_ids: Sequence[int]) -> float:
        return self.score_many([input_ids])[0]

    def score_many(self, inputs: Sequence[Sequence[int]]) -> list[float]:
        """One score per token sequence, in the order given."""
        import torch

        windows = [self.window(ids) for ids in inputs]
        order = sorted(range(len(windows)), key=lambda i: len(windows[i]))
        scores = [0.0] * len(windows)
        for batch in _batches([len(windows[i]) for i in order], self.batch_tokens):
            rows = [order[i] for i in batch]
            width = len(windows[rows[-1]])  # sorted: the last is the longest
            ids = torch.zeros((len(rows), width), dtype=torch.long)
            for r, i in enumerate(rows):
                ids[r, :len(windows[i])] = torch.tensor(windows[i])
            last = torch.tensor([len(windows[i]) - 1 for i in rows])
            with torch.inference_mode():
                hidden = self.model.base_model(input_ids=ids.to(self.device)).last_hidden_state
                h = hidden[torch.arange(len(rows)), last.to(self.device)].float()  # (rows, hidden)
                out = h @ self._head.T
                if self.kind == "generative":
                    values = out.softmax(-1)[:, 0]
                else:
                    values = torch.sigmoid(out[:, 0] + (0.0 if self._bias is None else self._bias[0]))
            for i, v in zip(rows, values.tolist(), strict=True):
                scores[i] = float(v)
        return scores

    def score(self, episodes: Sequence[Episode]) -> dict[str, float]:
        ids = [episode_token_ids(ep, self.chat).input_ids for ep in episodes]
        return dict(zip((ep.episode_id for ep in episodes), self.score_many(ids), strict=True))


def _batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Consecutive index runs of ascending `lengths` whose padded size (rows × the longest) stays within `budget`;
    a sequence longer than the budget goes alone."""
    out: list[list[int]] = []
    for i, n in enumerate(lengths):
        if out and (len(out[-1]) + 1) * n <= budget:
            out[-1].append(i)
        else:
            out.append([i])
    return out
