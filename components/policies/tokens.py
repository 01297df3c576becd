"""Exact tokens across turns: an episode's context is kept as token ids and only ever grows.

The prompt of turn t+1 is turn t's prompt, the response tokens as sampled, the end-of-turn tokens when the
response stopped without them, and the new observation's tokens, taken from the chat template's difference
(what the template writes after an assistant turn and before the next). Decoded text is never tokenized again,
so what a trainer sees is what the model saw. Message contents are tokenized with special-token strings split
into plain text: a program that prints "<|im_start|>system" cannot forge a turn of the conversation.

`episode_token_ids` turns any Episode into `input_ids` and a loss mask: the recorded ids for model episodes,
and for text-only episodes (the scripted teacher, API models) ids built turn by turn the same way.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from components.envs.episode import Episode

_SLOT = "\u2063MEDGYM-SLOT-{}\u2063"  # a placeholder no real message contains
# A fast tokenizer keeps `split_special_tokens` as a flag on its shared Rust tokenizer, set by each call: two threads
# encoding at once (the rollout engine's environment threads, its model thread) can each run under the other's flag,
# spelling a template's special tokens out as text, or reading a program's printed "<|im_start|>" as a real turn.
# Every encode here holds this lock.
_ENCODE = threading.Lock()


class TokenContextError(ValueError):
    """A recorded episode whose token ids do not form one growing context."""


class ChatTokens:
    """One tokenizer's chat template, split into fixed template pieces and message contents."""

    def __init__(self, tokenizer: Any):
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template")
        self.tokenizer = tokenizer
        eos = tokenizer.eos_token
        if eos is None:
            raise ValueError("the tokenizer has no end-of-turn (eos) token")
        self.eos_id: int = tokenizer.convert_tokens_to_ids(eos)
        self.end_ids = self._observation_pieces()

    # ------------------------------------------------------------ building contexts
    def start(self, messages: list[dict[str, str]]) -> list[int]:
        """The ids of the conversation so far, ending in the assistant's generation prompt."""
        slotted = [{"role": m["role"], "content": _SLOT.format(i)} for i, m in enumerate(messages)]
        text = self.tokenizer.apply_chat_template(slotted, add_generation_prompt=True, tokenize=False)
        ids: list[int] = []
        for i, m in enumerate(messages):
            head, sep, text = text.partition(_SLOT.format(i))
            if not sep:
                raise ValueError(f"the chat template dropped message {i} ({m['role']})")
            ids += self._template(head) + self.content(m["content"])
        return ids + self._template(text)

    def observation(self, text: str) -> list[int]:
        """The ids that follow a response's end-of-turn tokens: the observation as a user turn, then the
        generation prompt of the next assistant turn."""
        return self._obs_head + self.content(text) + self._obs_tail

    def response(self, text: str) -> list[int]:
        """A text-only response as ids (content only; the end-of-turn ids are `end_ids`)."""
        return self.content(text)

    def close_response(self, token_ids: list[int]) -> list[int]:
        """What must follow sampled ids before the next turn: the end-of-turn ids unless it already ended."""
        return [] if token_ids and token_ids[-1] == self.eos_id else list(self.end_ids)

    def content(self, text: str) -> list[int]:
        with _ENCODE:
            return self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    # ------------------------------------------------------------ the template's difference
    def _template(self, text: str) -> list[int]:
        if not text:
            return []
        with _ENCODE:
            return self.tokenizer(text, add_special_tokens=False, split_special_tokens=False)["input_ids"]

    def _observation_pieces(self) -> list[int]:
        """Render a conversation with and without a following user turn; the difference after the assistant's
        end-of-turn token is what an observation adds."""
        base = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                {"role": "assistant", "content": _SLOT.format("a")}]
        tmpl = self.tokenizer.apply_chat_template
        before = tmpl(base, tokenize=False)
        after = tmpl(base + [{"role": "user", "content": _SLOT.format("o")}], add_generation_prompt=True,
                     tokenize=False)
        eos = self.tokenizer.eos_token
        cut = before.find(eos, before.index(_SLOT.format("a")))
        if cut < 0 or not after.startswith(before[: cut + len(eos)]):
            raise ValueError("the chat template does not end an assistant turn with the eos token, or rewrites "
                             "earlier turns when one is added: exact multi-turn tokens need a template that only "
                             "appends")
        end = before[before.index(_SLOT.format("a")) + len(_SLOT.format("a")): cut + len(eos)]
        head, _, tail = after[cut + len(eos):].partition(_SLOT.format("o"))
        self._obs_head, self._obs_tail = self._template(head), self._template(tail)
        return self._template(end)


@dataclass
class TokenizedEpisode:
    input_ids: list[int]
    loss_mask: list[int]  # 1 on what the model said (responses and their end-of-turn ids), 0 elsewhere
    exact: bool  # True: the ids the model saw and produced, as recorded; False: built from text


def episode_token_ids(episode: Episode, chat: ChatTokens, *, max_tokens: int | None = None) -> TokenizedEpisode:
    """One training sequence for an episode. Model episodes give back their recorded ids; text-only episodes are
    tokenized turn by turn with the same pieces a live model would have seen."""
    turns = [t for t in episode.turns if t.raw_text is not None]
    if turns and all(t.prompt_token_ids is not None and t.response_token_ids is not None for t in turns):
        out = _recorded(episode, chat)
    else:
        out = _from_text(episode, chat)
    if max_tokens is not None and len(out.input_ids) > max_tokens:
        raise TokenContextError(f"episode {episode.episode_id}: {len(out.input_ids)} tokens > {max_tokens}")
    return out


def _recorded(episode: Episode, chat: ChatTokens) -> TokenizedEpisode:
    ids: list[int] = []
    mask: list[int] = []
    for t in episode.turns:
        prompt, resp = t.prompt_token_ids or [], t.response_token_ids or []
        if prompt[: len(ids)] != ids:
            raise TokenContextError(f"episode {episode.episode_id}, turn {t.index}: the prompt does not extend the "
                                    "previous turn's context (the record was re-tokenized or edited)")
        if ids:  # the closing ids of the previous response belong to what the model should say
            closing = len(chat.close_response(_last_response(episode, t.index)))
            mask += [1] * closing + [0] * (len(prompt) - len(ids) - closing)
        else:
            mask += [0] * len(prompt)
        turn_mask = t.loss_mask if t.loss_mask is not None else [1] * len(resp)
        if len(turn_mask) != len(resp):
            raise TokenContextError(f"episode {episode.episode_id}, turn {t.index}: loss_mask has {len(turn_mask)} "
                                    f"entries for {len(resp)} response tokens")
        ids = prompt + resp
        mask += list(turn_mask)
    tail = chat.close_response(episode.turns[-1].response_token_ids or []) if episode.turns else []
    return TokenizedEpisode(input_ids=ids + tail, loss_mask=mask + [1] * len(tail), exact=True)


def _last_response(episode: Episode, index: int) -> list[int]:
    return episode.turns[index - 1].response_token_ids or []


def _from_text(episode: Episode, chat: ChatTokens) -> TokenizedEpisode:
    msgs = episode.messages()
    n_head = 2 if episode.system_prompt is not None else 1
    ids = chat.start(msgs[:n_head])
    mask = [0] * len(ids)
    turns = episode.turns
    for i, t in enumerate(turns):
        resp = chat.response(t.raw_text if t.raw_text is not None else msgs[n_head + 2 * i]["content"])
        resp += chat.end_ids
        ids += resp
        mask += [1] * len(resp)
        if i + 1 < len(turns):
            obs = chat.observation(t.observation)
            ids += obs
            mask += [0] * len(obs)
    return TokenizedEpisode(input_ids=ids, loss_mask=mask, exact=False)
