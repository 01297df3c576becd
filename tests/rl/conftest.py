"""A small generated cohort, its train split and a world model: the case's own results, the statistical model
fit on the train split where a result was not recorded."""

from __future__ import annotations

import pytest

from components.diag.cohort import CohortConfig, build_cohort
from components.diag.record import Case
from components.diag.world import RecordedWorldModel, StatisticalWorldModel
from components.policies.tokens import episode_token_ids


def spans(mask: list[int], value: int) -> list[tuple[int, int]]:
    """The [start, end) runs of `value` in a 0/1 mask."""
    out, start = [], None
    for i, m in enumerate([*mask, 1 - value]):
        if m == value and start is None:
            start = i
        elif m != value and start is not None:
            out.append((start, i))
            start = None
    return out


def check_masks(sample, chat) -> None:
    """1-spans are exactly the agent's replies; 0-spans exactly what the environment added between them."""
    ep, tok = sample.episode, chat.tokenizer
    assert len(sample.completion_ids) == len(sample.env_mask) == len(sample.logprobs)
    first = [{"role": "system", "content": ep.system_prompt}, {"role": "user", "content": ep.first_observation}]
    assert sample.prompt_ids == chat.start(first)
    agent, env = spans(sample.env_mask, 1), spans(sample.env_mask, 0)
    assert len(agent) == len(ep.turns) and len(env) == len(ep.turns) - 1
    for (a, b), turn in zip(agent, ep.turns, strict=True):
        assert sample.completion_ids[a:b] == turn.response_token_ids
        assert tok.decode(sample.completion_ids[a:b], skip_special_tokens=True) == turn.raw_text
        assert sample.logprobs[a:b] == turn.response_logprobs
    for (a, b), turn in zip(env, ep.turns, strict=False):
        closing = chat.close_response(turn.response_token_ids)
        assert sample.completion_ids[a:b] == closing + chat.observation(turn.observation)
        assert tok.decode(sample.completion_ids[a + len(closing):b]).count(turn.observation) == 1
        assert set(sample.logprobs[a:b]) == {0.0}
    for prev, turn in zip(ep.turns, ep.turns[1:], strict=False):  # the context only grows
        assert turn.prompt_token_ids[: len(prev.prompt_token_ids)] == prev.prompt_token_ids
    whole = sample.prompt_ids + sample.completion_ids
    assert ep.turns[-1].prompt_token_ids + ep.turns[-1].response_token_ids == whole
    assert episode_token_ids(ep, chat).input_ids[: len(whole)] == whole


@pytest.fixture(scope="session")
def rl_train() -> list[Case]:
    return [c for c in build_cohort(CohortConfig(patients=40, seed=3)) if c.split == "train"]


@pytest.fixture(scope="session")
def rl_world(rl_train) -> RecordedWorldModel:
    return RecordedWorldModel(fallback=StatisticalWorldModel.fit(rl_train, seed=0))


@pytest.fixture(scope="session")
def chat():
    from components.policies.tokens import ChatTokens
    from components.training.models import load_tokenizer

    return ChatTokens(load_tokenizer("SmolLM2-135M-Instruct"))
