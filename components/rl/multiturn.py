"""Multi-turn DiagEnv episodes as GRPO samples, on exact-token contexts.

A batch of episodes (each its own DiagEnv, case and sample index) is played turn by turn: every waiting episode's
context goes to the sampler in one call, each reply is parsed by its environment, and the context grows by the
sampled ids, the end-of-turn ids when the reply stopped without them, and the observation's ids from the chat
template's difference (components.policies.tokens.ChatTokens). Earlier text is never tokenized again, so the ids a
trainer scores are the ids the model saw and produced.

A `Sample` is what TRL's GRPOTrainer takes from a rollout_func: the first turn's prompt ids; the completion ids
(everything after it up to the last reply: agent and environment tokens); `env_mask`, 1 on tokens the model sampled
and 0 on the environment's (observations and the end-of-turn ids added after a reply cut at max_new_tokens: the
model did not choose them, so they get no policy gradient); the sampling log-probs of the agent tokens (0.0 on
environment tokens, which every use in TRL masks out). The Episode records the same ids per turn.

`Sampler` is one call, contexts -> (ids, log-probs) per context; `hf_sampler` samples with a transformers model's
`generate` (temperature, no top-k, stop at the end-of-turn token; temperature 0 decodes greedily), the log-probs of the sampled tokens under
softmax(logits / temperature), as GRPOTrainer scores them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from components.diag.env import DiagEnv
from components.diag.record import Case
from components.envs.episode import Episode
from components.policies.tokens import ChatTokens

Sampler = Callable[[list[list[int]]], list[tuple[list[int], list[float]]]]


class TurnSampling(BaseModel):
    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(default=1.0, ge=0, description="0: greedy (evaluation); GRPO needs samples that "
                               "differ, so its settings keep it above 0")
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_new_tokens: int = Field(default=64, gt=0, description="per agent turn")
    max_context: int = Field(default=2048, gt=0, description="a turn whose prompt + max_new_tokens exceeds this ends "
                             "the episode (outcome context_limit)")


@dataclass
class Sample:
    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]  # per completion token: 1 sampled by the model, 0 the environment's
    logprobs: list[float]  # per completion token: the sampling log-prob, 0.0 on environment tokens
    episode: Episode


def play_batch(envs: Sequence[DiagEnv], cases: Sequence[Case], sample_indices: Sequence[int], chat: ChatTokens,
               sample: Sampler, sampling: TurnSampling) -> list[Sample]:
    """Play one episode per (env, case, sample index), all turns batched across the episodes still running."""
    n = len(envs)
    contexts: list[list[int]] = []
    for env, case, index in zip(envs, cases, sample_indices, strict=True):
        first = env.reset(case, index).text
        system = env.episode.system_prompt
        contexts.append(chat.start(([{"role": "system", "content": system}] if system is not None else [])
                                   + [{"role": "user", "content": first}]))
    prompts = [list(c) for c in contexts]
    completion: list[list[int]] = [[] for _ in range(n)]
    mask: list[list[int]] = [[] for _ in range(n)]
    logps: list[list[float]] = [[] for _ in range(n)]
    active = list(range(n))
    while active:
        for i in active:
            if len(contexts[i]) + sampling.max_new_tokens > sampling.max_context:
                envs[i].end_for_context(f"prompt {len(contexts[i])} + {sampling.max_new_tokens} new > "
                                        f"{sampling.max_context}")
        active = [i for i in active if not envs[i].episode.done]
        if not active:
            break
        started = time.monotonic()
        replies = sample([contexts[i] for i in active])
        share = (time.monotonic() - started) / len(active)  # a batch's time is shared by its members
        for i, (ids, lps) in zip(active, replies, strict=True):
            env = envs[i]
            result = env.step(chat.tokenizer.decode(ids, skip_special_tokens=True))
            turn = env.episode.turns[-1]
            turn.prompt_token_ids, turn.response_token_ids, turn.response_logprobs = contexts[i], ids, lps
            turn.model_time_s = share
            completion[i] += ids
            mask[i] += [1] * len(ids)
            logps[i] += lps
            if not result.done:
                between = chat.close_response(ids) + chat.observation(result.observation.text)
                completion[i] += between
                mask[i] += [0] * len(between)
                logps[i] += [0.0] * len(between)
                contexts[i] = contexts[i] + ids + between
        active = [i for i in active if not envs[i].episode.done]
    out = []
    for i, env in enumerate(envs):
        ep = env.episode
        ep.model_time_s = sum(t.model_time_s or 0.0 for t in ep.turns)
        ep.env_time_s = sum(t.duration_s for t in ep.turns)
        ep.prompt_tokens = max((len(t.prompt_token_ids or []) for t in ep.turns), default=len(prompts[i]))
        ep.completion_tokens = sum(mask[i])
        # an episode ended for its context has the last observation appended, which no reply followed: cut it
        end = max((k + 1 for k, m in enumerate(mask[i]) if m), default=0)
        out.append(Sample(prompts[i], completion[i][:end], mask[i][:end], logps[i][:end], ep))
    return out


def hf_sampler(model: Any, sampling: TurnSampling, eos_id: int, pad_id: int) -> Sampler:
    """Sample one reply per context with `model.generate` (left padding); each stops at its end-of-turn id."""
    import torch

    def sample(contexts: list[list[int]]) -> list[tuple[list[int], list[float]]]:
        width = max(len(c) for c in contexts)
        ids = torch.full((len(contexts), width), pad_id, dtype=torch.long)
        attention = torch.zeros_like(ids)
        for row, c in enumerate(contexts):
            ids[row, width - len(c):] = torch.tensor(c)
            attention[row, width - len(c):] = 1
        device = next(model.parameters()).device
        greedy = sampling.temperature == 0
        knobs = {"do_sample": False} if greedy else {"do_sample": True, "temperature": sampling.temperature,
                                                     "top_p": sampling.top_p, "top_k": 0}
        with torch.no_grad():
            out = model.generate(input_ids=ids.to(device), attention_mask=attention.to(device), **knobs,
                                 max_new_tokens=sampling.max_new_tokens, eos_token_id=eos_id, pad_token_id=pad_id,
                                 return_dict_in_generate=True, output_logits=True)
        new = out.sequences[:, width:].cpu()
        logits = torch.stack(out.logits, dim=1).float().cpu() / (1.0 if greedy else sampling.temperature)
        picked = torch.log_softmax(logits, dim=-1).gather(-1, new[..., None])[..., 0]
        replies = []
        for row in range(len(contexts)):
            tokens = new[row].tolist()
            end = tokens.index(eos_id) + 1 if eos_id in tokens else len(tokens)  # pad may be eos: cut at the first
            replies.append((tokens[:end], picked[row, :end].tolist()))
        return replies

    return sample
