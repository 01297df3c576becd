"""Oracle trajectories for the cold start: each train case played in DiagEnv as a clinician would write it, by the
DiagGym oracle policy (components.diag.oracle) through the rollout engine (components.rollout.play).

Each turn carries the ids a live model would have seen and written, built as components.policies.tokens builds
text episodes (the chat template's pieces around each message, contents tokenized once), so `episode_token_ids`
returns them as recorded and marks only the agent's replies (and their end-of-turn id) for the loss.
"""

from __future__ import annotations

from collections.abc import Iterable

from components.diag.catalogue import Catalogue
from components.diag.env import DiagEnv, DiagEnvConfig
from components.diag.oracle import OraclePolicy, oracle_replies
from components.diag.record import Case
from components.diag.world import WorldModel
from components.envs.episode import Episode, Sampling
from components.policies.tokens import ChatTokens
from components.rollout.jobs import RolloutJob
from components.rollout.play import play_jobs

__all__ = ["attach_tokens", "oracle_episode", "oracle_episodes", "oracle_replies"]


def oracle_episode(env: DiagEnv, case: Case, chat: ChatTokens, sample_index: int = 0) -> Episode:
    """One oracle episode of `case`, played on `env` (its world, settings and catalogue)."""
    policy = OraclePolicy(env.config, env.catalogue)
    [episode] = play_jobs(policy, lambda: env, [RolloutJob(case, sample_index, Sampling())]).episodes
    return attach_tokens(episode, chat)


def oracle_episodes(cases: Iterable[Case], world: WorldModel, chat: ChatTokens, config: DiagEnvConfig | None = None,
                    catalogue: Catalogue | None = None, samples: int = 1) -> list[Episode]:
    """`samples` oracle episodes per case, sample i on the world's draws for sample i (the same orders, other
    results where the environment varies them by sample), played by the rollout engine. Callers keep the correct
    ones (sft_examples does): a case whose own diagnosis the grader rejects is a data problem to look at, not a
    trajectory to imitate."""
    config = config or DiagEnvConfig()
    policy = OraclePolicy(config, catalogue)
    jobs = [RolloutJob(case, i, Sampling()) for case in cases for i in range(samples)]
    episodes = play_jobs(policy, lambda: DiagEnv(world, config, catalogue), jobs).episodes
    return [attach_tokens(e, chat) for e in episodes]


def attach_tokens(episode: Episode, chat: ChatTokens) -> Episode:
    """Fill each text turn's prompt and response ids the way a model turn records them: the context only grows
    (prompt of turn t+1 = prompt t + response t + the observation's ids from the template's difference)."""
    messages = episode.messages()
    context = chat.start(messages[: 2 if episode.system_prompt is not None else 1])
    for turn in episode.turns:
        response = chat.response(turn.raw_text or "") + chat.end_ids  # a model ends its turn with these
        turn.prompt_token_ids, turn.response_token_ids, turn.loss_mask = list(context), response, [1] * len(response)
        context = context + response + chat.observation(turn.observation)
    if episode.turns:
        episode.prompt_tokens = len(episode.turns[-1].prompt_token_ids or [])
        episode.completion_tokens = sum(len(t.response_token_ids or []) for t in episode.turns)
    return episode
