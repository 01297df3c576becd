"""Training data from episodes: SFT sequences, DPO preference pairs and verifier examples, all as token ids.

Every sequence comes from `episode_token_ids` (components.policies.tokens): the ids the model saw and produced
for model episodes, ids built turn by turn for text episodes; chat text is never tokenized again here. The
checker's verdict (`Episode.check`) labels examples and is never part of an input.

Preference pairs are the kinds the MedAgentGym paper builds:
  within_episode   in an episode that ended correct, the code that ran cleanly after an earlier failed run,
                   against that failed run, both as replies to the context the failed run answered
  across_episodes  for one task, a correct episode against an incorrect one, after their shared prompt
  verifier_ranked  once a verifier exists: per task, the highest-scored correct episode against the
                   lowest-scored incorrect one
A pair's prompt is the shared prefix; chosen and rejected differ only after it.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from components.envs.actions import RunCode
from components.envs.episode import Episode, Outcome
from components.policies.tokens import ChatTokens, TokenizedEpisode, episode_token_ids


class EmptyDatasetError(ValueError):
    """A stage's data has no usable rows; the message says which and why (no empty training run)."""


@dataclass
class SFTExample:
    episode_id: str
    task_id: str
    domain: str | None
    input_ids: list[int]
    loss_mask: list[int]  # 1 on the model's own tokens: its replies and their end-of-turn ids


@dataclass
class PreferencePair:
    kind: Literal["within_episode", "across_episodes", "verifier_ranked"]
    task_id: str
    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]
    chosen_mask: list[int]  # 1 on model tokens of the continuation (observations in multi-turn ones are 0)
    rejected_mask: list[int]
    source: dict[str, str] = field(default_factory=dict)  # which episodes and turns the pair came from


@dataclass
class VerifierExample:
    episode_id: str
    task_id: str
    input_ids: list[int]
    label: int  # 1: the checker accepted the episode's submission


def sft_examples(episodes: Iterable[Episode], chat: ChatTokens, max_tokens: int | None = None) -> list[SFTExample]:
    """Successful episodes as whole multi-turn sequences; longer ones than `max_tokens` are left out."""
    out = []
    for ep in episodes:
        if ep.outcome != Outcome.CORRECT:
            continue
        tk = episode_token_ids(ep, chat)
        if max_tokens is not None and len(tk.input_ids) > max_tokens:
            continue
        out.append(SFTExample(ep.episode_id, ep.task_id, ep.domain, tk.input_ids, tk.loss_mask))
    if not out:
        raise EmptyDatasetError("no SFT rows: none of the episodes ended correct"
                                + (f" within {max_tokens} tokens" if max_tokens else ""))
    return out


def within_episode_pairs(episodes: Iterable[Episode], chat: ChatTokens) -> list[PreferencePair]:
    out = []
    for ep in episodes:
        if ep.outcome != Outcome.CORRECT:
            continue
        runs = [t for t in ep.turns if isinstance(t.action, RunCode)]
        for i, failed in enumerate(runs):
            if failed.error is None:
                continue
            fixed = next((t for t in runs[i + 1:] if t.error is None and t.exec_result is not None
                          and t.exec_result.status == "ok"), None)
            if fixed is None:
                continue
            prompt = _context_before(ep, failed.index, chat)
            chosen = _reply_ids(ep, fixed.index, chat)
            rejected = _reply_ids(ep, failed.index, chat)
            if chosen == rejected:
                continue
            out.append(PreferencePair("within_episode", ep.task_id, prompt, chosen, rejected, [1] * len(chosen),
                                      [1] * len(rejected), {"episode": ep.episode_id, "chosen_turn": str(fixed.index),
                                                            "rejected_turn": str(failed.index)}))
    return out


def across_episode_pairs(episodes: Iterable[Episode], chat: ChatTokens, seed: int = 0,
                         per_task: int = 1) -> list[PreferencePair]:
    """Per task, up to `per_task` (correct, incorrect) pairs, drawn with `seed`."""
    by_task: dict[str, list[Episode]] = defaultdict(list)
    for ep in episodes:
        if ep.outcome is not None and ep.outcome != Outcome.CONTEXT_LIMIT:
            by_task[ep.task_id].append(ep)
    rng = random.Random(seed)
    out = []
    for task_id in sorted(by_task):
        good = [e for e in by_task[task_id] if e.outcome == Outcome.CORRECT]
        bad = [e for e in by_task[task_id] if e.outcome != Outcome.CORRECT]
        pairs = [(g, b) for g in good for b in bad]
        for g, b in rng.sample(pairs, min(per_task, len(pairs))):
            tg, tb = episode_token_ids(g, chat), episode_token_ids(b, chat)
            cut = _shared_prompt(tg, tb)
            if cut == 0:
                continue
            out.append(PreferencePair("across_episodes", task_id, tg.input_ids[:cut], tg.input_ids[cut:],
                                      tb.input_ids[cut:], tg.loss_mask[cut:], tb.loss_mask[cut:],
                                      {"chosen": g.episode_id, "rejected": b.episode_id}))
    return out


def verifier_ranked_pairs(episodes: Iterable[Episode], chat: ChatTokens, scores: dict[str, float]
                          ) -> list[PreferencePair]:
    """Per task, the correct episode the verifier scores highest against the incorrect one it scores lowest."""
    by_task: dict[str, list[Episode]] = defaultdict(list)
    for ep in episodes:
        if ep.outcome is not None and ep.outcome != Outcome.CONTEXT_LIMIT and ep.episode_id in scores:
            by_task[ep.task_id].append(ep)
    out = []
    for task_id in sorted(by_task):
        good = [e for e in by_task[task_id] if e.outcome == Outcome.CORRECT]
        bad = [e for e in by_task[task_id] if e.outcome != Outcome.CORRECT]
        if not good or not bad:
            continue
        g = max(good, key=lambda e: (scores[e.episode_id], e.episode_id))
        b = min(bad, key=lambda e: (scores[e.episode_id], e.episode_id))
        tg, tb = episode_token_ids(g, chat), episode_token_ids(b, chat)
        cut = _shared_prompt(tg, tb)
        if cut == 0 or tg.input_ids[cut:] == tb.input_ids[cut:]:
            continue
        out.append(PreferencePair("verifier_ranked", task_id, tg.input_ids[:cut], tg.input_ids[cut:],
                                  tb.input_ids[cut:], tg.loss_mask[cut:], tb.loss_mask[cut:],
                                  {"chosen": g.episode_id, "rejected": b.episode_id,
                                   "chosen_score": f"{scores[g.episode_id]:.4f}",
                                   "rejected_score": f"{scores[b.episode_id]:.4f}"}))
    return out


def preference_pairs(episodes: Sequence[Episode], chat: ChatTokens, seed: int = 0) -> list[PreferencePair]:
    pairs = within_episode_pairs(episodes, chat) + across_episode_pairs(episodes, chat, seed)
    if not pairs:
        correct = sum(e.outcome == Outcome.CORRECT for e in episodes)
        raise EmptyDatasetError(f"no preference pairs from {len(episodes)} episodes ({correct} correct): no correct "
                                "episode recovered from a failed run, and no task has both a correct and an incorrect "
                                "episode")
    return pairs


def verifier_examples(episodes: Iterable[Episode], chat: ChatTokens, max_tokens: int, seed: int = 0
                      ) -> list[VerifierExample]:
    """Whole finished episodes labelled by the checker, length-filtered, balanced by subsampling the larger class.

    Runs that never submitted are failures too: the verifier is scored on every finished episode of a task (best@k
    picks among all of them), so it learns from the same mix, not only from wrong submitted answers.
    """
    rows: dict[int, list[VerifierExample]] = {0: [], 1: []}
    for ep in episodes:
        if ep.outcome is None or ep.outcome == Outcome.CONTEXT_LIMIT:
            continue
        tk = episode_token_ids(ep, chat)
        if len(tk.input_ids) > max_tokens:
            continue
        label = int(ep.outcome == Outcome.CORRECT)
        rows[label].append(VerifierExample(ep.episode_id, ep.task_id, tk.input_ids, label))
    n = min(len(rows[0]), len(rows[1]))
    if n == 0:
        raise EmptyDatasetError(f"no verifier rows: {len(rows[1])} correct and {len(rows[0])} incorrect finished "
                                f"episodes within {max_tokens} tokens; both classes are needed")
    rng = random.Random(seed)
    out = rng.sample(rows[0], n) + rng.sample(rows[1], n)
    rng.shuffle(out)
    return out


# ---------------------------------------------------------------------- pieces of an episode's sequence
def _context_before(ep: Episode, turn_index: int, chat: ChatTokens) -> list[int]:
    """The ids the model saw before replying at `turn_index`."""
    turn = ep.turns[turn_index]
    if turn.prompt_token_ids is not None:
        return list(turn.prompt_token_ids)
    head = ep.model_copy(update={"turns": ep.turns[:turn_index]})
    if not head.turns:
        n = 2 if ep.system_prompt is not None else 1
        return chat.start(ep.messages()[:n])
    return episode_token_ids(head, chat).input_ids + chat.observation(ep.turns[turn_index - 1].observation)


def _reply_ids(ep: Episode, turn_index: int, chat: ChatTokens) -> list[int]:
    turn = ep.turns[turn_index]
    if turn.response_token_ids is not None:
        return list(turn.response_token_ids) + chat.close_response(turn.response_token_ids)
    return chat.response(turn.raw_text or "") + chat.end_ids


def _shared_prompt(a: TokenizedEpisode, b: TokenizedEpisode) -> int:
    """Where the two sequences' first model token is, if they share everything before it; else 0."""
    first = a.loss_mask.index(1) if 1 in a.loss_mask else 0
    if first == 0 or a.input_ids[:first] != b.input_ids[:first] or 1 not in b.loss_mask or b.loss_mask.index(1) != first:
        return 0
    return first
