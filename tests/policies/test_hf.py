"""The hf backend: one batch for every waiting episode, each row with its own sampling, stop and seed."""

from __future__ import annotations

import pytest

from components.envs.episode import Sampling
from components.envs.prompt import agent_messages
from components.policies.hf import HFConfig, HFPolicy
from components.policies.protocol import GenerationRequest
from components.policies.tokens import ChatTokens


@pytest.fixture(scope="module")
def policy(tiny_model):
    p = HFPolicy(HFConfig(model=str(tiny_model), max_context=512))
    yield p
    p.close()


def _request(chat: ChatTokens, text: str, key: str, **sampling) -> GenerationRequest:
    msgs = agent_messages(text)
    return GenerationRequest(key=key, messages=msgs, sampling=Sampling(**{"max_new_tokens": 24, **sampling}),
                             prompt_token_ids=chat.start(msgs))


def test_a_batch_gives_each_row_what_it_would_get_alone(policy):
    chat = ChatTokens(policy.tokenizer)
    texts = ["short task", "a much longer task description that pads the other rows on the left " * 3, "third"]
    reqs = [_request(chat, t, str(i), temperature=0.0 if i == 0 else 0.8, seed=10 + i) for i, t in enumerate(texts)]
    batched = policy.generate(reqs)
    alone = [policy.generate([r])[0] for r in reqs]
    for b, a in zip(batched, alone, strict=True):
        assert b.token_ids == a.token_ids  # left padding and other rows change nothing; seeds are per row
        assert len(b.logprobs) == len(b.token_ids) and all(lp <= 0.0 for lp in b.logprobs)
        assert b.text == policy.tokenizer.decode(b.token_ids, skip_special_tokens=True)
        assert b.finish_reason in ("stop", "length")


def test_seeds_make_sampling_reproducible_and_distinct(policy):
    chat = ChatTokens(policy.tokenizer)
    a = policy.generate([_request(chat, "t", "a", temperature=1.0, seed=1)])[0]
    again = policy.generate([_request(chat, "t", "a", temperature=1.0, seed=1)])[0]
    other = policy.generate([_request(chat, "t", "b", temperature=1.0, seed=2)])[0]
    assert a.token_ids == again.token_ids and a.token_ids != other.token_ids


def test_the_reply_never_exceeds_the_context(policy):
    chat = ChatTokens(policy.tokenizer)
    req = _request(chat, "x " * 200, "long", max_new_tokens=400)
    (gen,) = policy.generate([req])
    assert len(req.prompt_token_ids) + len(gen.token_ids) <= policy.max_context
    assert gen.finish_reason in ("stop", "length")


def test_a_closed_fence_ends_the_reply(policy):
    def ids(text: str) -> list[int]:
        return policy.tokenizer(text, add_special_tokens=False)["input_ids"]

    assert not policy._closes_action(ids("I run it.\n```python\nprint(1)\n"))  # still open: keep going
    assert policy._closes_action(ids("I run it.\n```python\nprint(1)\n```"))


def test_requests_without_token_ids_are_refused(policy):
    req = GenerationRequest(key="k", messages=agent_messages("t"), sampling=Sampling())
    with pytest.raises(ValueError, match="prompt_token_ids"):
        policy.generate([req])


def test_a_later_turn_reuses_the_episodes_keys_and_values_and_gets_the_same_tokens(tiny_model):
    """Turn 2 computes only its new tokens; what it samples equals recomputing the whole prompt."""
    cached = HFPolicy(HFConfig(model=str(tiny_model), max_context=1024))
    fresh = HFPolicy(HFConfig(model=str(tiny_model), max_context=1024, kv_cache_episodes=0))
    chat = ChatTokens(cached.tokenizer)
    first = [_request(chat, f"task {i} " * (i + 1), f"ep{i}", temperature=0.0 if i else 0.9, seed=i) for i in range(3)]
    gens = cached.generate(first)
    assert set(cached._kv) == {"ep0", "ep1", "ep2"}
    second = []
    for r, g in zip(first, gens, strict=True):
        ctx = r.prompt_token_ids + g.token_ids + chat.close_response(g.token_ids) + chat.observation("output " * 5)
        second.append(GenerationRequest(key=r.key, messages=r.messages + [{}, {}], sampling=r.sampling, prompt_token_ids=ctx))
    a = cached.generate(second)
    b = fresh.generate(second)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    for x, y in zip(a, b, strict=True):
        assert max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs, strict=True)) < 1e-3
    cached.release("ep0")
    assert "ep0" not in cached._kv and not fresh._kv
