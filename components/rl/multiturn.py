"""Multi-turn episodes of any environment (components.envs.protocol.Env: DiagEnv, CodingEnv) as GRPO samples, on
exact-token contexts, played by the rollout engine.

A batch of episodes (each its own environment, task and sample index) is played by components.rollout.play with a token
policy (the hf policy over the trainer's model, in GRPO): every waiting episode's context goes to the policy in one
call, each reply is parsed by its environment, and the context grows by the sampled ids, the end-of-turn ids when
the reply stopped without them, and the observation's ids from the chat template's difference
(components.policies.tokens.ChatTokens). Earlier text is never tokenized again, so the ids a trainer scores are the
ids the model saw and produced, and the hf policy keeps each episode's keys and values between turns: a turn
computes only its new tokens.

A `Sample` is what TRL's GRPOTrainer takes from a rollout_func, read off the recorded Episode (`episode_sample`):
the first turn's prompt ids; the completion ids (everything after it up to the last reply: agent and environment
tokens); `env_mask`, 1 on tokens the model sampled and 0 on the environment's (observations and the end-of-turn ids
added after a reply cut at max_new_tokens: the model did not choose them, so they get no policy gradient); the
sampling log-probs of the agent tokens (0.0 on environment tokens, which every use in TRL masks out). A turn ends
its episode (outcome context_limit) when its prompt and max_new_tokens would not fit `max_context`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from components.diag.catalogue import Catalogue
from components.diag.env import DiagEnv, DiagEnvConfig
from components.diag.record import Case
from components.diag.world import WorldModel
from components.envs.episode import Episode, Sampling
from components.envs.protocol import Env
from components.policies.protocol import Policy
from components.policies.tokens import ChatTokens
from components.rollout.jobs import RolloutJob, episode_seed
from components.rollout.play import play_jobs


class TurnSampling(BaseModel):
    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(default=1.0, ge=0, description="0: greedy (evaluation); GRPO needs samples that "
                               "differ, so its settings keep it above 0")
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_new_tokens: int = Field(default=64, gt=0, description="per agent turn")
    max_context: int = Field(default=2048, gt=0, description="a turn whose prompt + max_new_tokens exceeds this ends "
                             "the episode (outcome context_limit)")

    def sampling(self, seed: int) -> Sampling:
        return Sampling(temperature=self.temperature, top_p=self.top_p, max_new_tokens=self.max_new_tokens, seed=seed)


@dataclass
class Sample:
    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]  # per completion token: 1 sampled by the model, 0 the environment's
    logprobs: list[float]  # per completion token: the sampling log-prob, 0.0 on environment tokens
    episode: Episode


def play_episodes(policy: Policy, env_factory: Callable[[], Env], items: Sequence[Any], sample_indices: Sequence[int],
                  chat: ChatTokens, sampling: TurnSampling, *, seed: int = 0) -> list[Sample]:
    """One episode per (item, sample index), each on a fresh environment from `env_factory`, all turns batched across
    the episodes still running; sample i of an item (whatever the environment resets to: a coding Task, a DiagGym
    Case) draws from `episode_seed(seed, item, i)`. `policy` must take token ids, with room for
    `sampling.max_context`."""
    if not policy.uses_tokens:
        raise ValueError(f"GRPO samples need exact token ids: the {policy.backend} policy does not give them")
    jobs = [RolloutJob(item, i, sampling.sampling(episode_seed(seed, item.task_id, i)))
            for item, i in zip(items, sample_indices, strict=True)]
    played = play_jobs(policy, env_factory, jobs, max_in_flight=len(jobs), min_new_tokens=sampling.max_new_tokens)
    return [episode_sample(e, chat) for e in played.episodes]


def play_samples(policy: Policy, world: WorldModel, cases: Sequence[Case], sample_indices: Sequence[int],
                 chat: ChatTokens, sampling: TurnSampling, *, env_config: DiagEnvConfig | None = None,
                 catalogue: Catalogue | None = None, seed: int = 0) -> list[Sample]:
    """`play_episodes` in DiagEnv: one episode per (case, sample index) in `world`."""
    return play_episodes(policy, lambda: DiagEnv(world, env_config, catalogue), cases, sample_indices, chat, sampling,
                         seed=seed)


def episode_sample(episode: Episode, chat: ChatTokens) -> Sample:
    """The sample a trainer scores, read off a token episode's turns: each turn's reply, then the ids its context grew
    by before the next turn's prompt (the closing ids and the observation)."""
    turns = episode.turns
    if not turns:  # ended for its context before the first reply: the prompt alone
        return Sample(chat.start(episode.messages()), [], [], [], episode)
    ids: list[int] = []
    mask: list[int] = []
    logps: list[float] = []
    for k, turn in enumerate(turns):
        reply, prompt = turn.response_token_ids, turn.prompt_token_ids
        if reply is None or prompt is None or turn.response_logprobs is None:
            raise ValueError(f"episode {episode.episode_id} turn {k}: no token ids (not played by a token policy)")
        ids += reply
        mask += [1] * len(reply)
        logps += turn.response_logprobs
        if k + 1 < len(turns):
            between = turns[k + 1].prompt_token_ids[len(prompt) + len(reply):]
            ids += between
            mask += [0] * len(between)
            logps += [0.0] * len(between)
    return Sample(list(turns[0].prompt_token_ids), ids, mask, logps, episode)
