"""Oracle trajectories for the cold start: each train case played in DiagEnv as a clinician would write it.

The replies order the case's key exams (as many per turn as the environment allows, catalogue exams only) and then
give the true diagnosis, in the line format the environment parses (`Order: a, b` / `Final diagnosis: X`; see
components.diag.actions.ACTION_FORMAT). They are read from the Case record, outside the environment: that is for
building training data only, never for an agent under evaluation.

Each turn carries the ids a live model would have seen and written, built as components.policies.tokens builds
text episodes (the chat template's pieces around each message, contents tokenized once), so `episode_token_ids`
returns them as recorded and marks only the agent's replies (and their end-of-turn id) for the loss.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from components.diag.catalogue import Catalogue, default_catalogue
from components.diag.env import DiagEnv, DiagEnvConfig
from components.diag.record import Case
from components.diag.world import WorldModel
from components.envs.episode import Episode, PolicyInfo
from components.policies.tokens import ChatTokens

ORACLE = PolicyInfo(backend="scripted", model="oracle")
_SEPARATORS = ",;|"  # the line format splits exam names on these


def oracle_replies(case: Case, config: DiagEnvConfig, catalogue: Catalogue | None = None) -> list[str]:
    """The clinician's replies for `case`: its key exams in the fewest turns, then its diagnosis."""
    cat = catalogue or default_catalogue()
    exams = [e for e in case.key_exams if cat.exam(e) is not None]  # an imported label outside it orders nothing
    per_turn = config.max_exams_per_turn
    orders = [exams[i: i + per_turn] for i in range(0, len(exams), per_turn)]
    orders = orders[: config.max_turns - 1]  # the last turn is the diagnosis's
    replies = [_order_line(o) for o in orders]
    return [*replies, f"Final diagnosis: {case.diagnosis.strip()}"]


def _order_line(exams: list[str]) -> str:
    if any(s in e for e in exams for s in _SEPARATORS):
        return json.dumps({"type": "order_exams", "exams": exams})
    return "Order: " + ", ".join(exams)


def oracle_episode(env: DiagEnv, case: Case, chat: ChatTokens, sample_index: int = 0) -> Episode:
    env.reset(case, sample_index)
    for reply in oracle_replies(case, env.config, env.catalogue):
        if env.step(reply).done:
            break
    episode = env.episode
    episode.policy = ORACLE
    return attach_tokens(episode, chat)


def oracle_episodes(cases: Iterable[Case], world: WorldModel, chat: ChatTokens, config: DiagEnvConfig | None = None,
                    catalogue: Catalogue | None = None, samples: int = 1) -> list[Episode]:
    """`samples` oracle episodes per case, sample i on the world's draws for sample i (the same orders, other
    results where the environment varies them by sample). Callers keep the correct ones (sft_examples does): a case
    whose own diagnosis the grader rejects is a data problem to look at, not a trajectory to imitate."""
    env = DiagEnv(world, config, catalogue)
    return [oracle_episode(env, case, chat, i) for case in cases for i in range(samples)]


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
