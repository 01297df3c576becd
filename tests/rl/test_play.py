"""A checkpoint played in DiagEnv for evaluation: batched episodes on exact-token contexts, paired with the
baselines' draws, reproducible by seed, greedy at temperature 0."""

from __future__ import annotations

from components.diag.baselines import RandomExamsAgent
from components.diag.env import DiagEnvConfig
from components.diag.evaluate import build_report, run_agent
from components.rl.multiturn import TurnSampling
from components.rl.play import model_policy, play_model


def test_a_model_plays_every_case_and_sample_in_batches_reproducibly(rl_train, rl_world, tiny_model):
    cases, config = rl_train[:3], DiagEnvConfig(max_turns=2)
    sampling = TurnSampling(temperature=1.0, max_new_tokens=6)
    played = play_model(tiny_model, cases, rl_world, config, sampling, samples=2, batch=4, seed=7, name="tiny")
    assert [(e.task_id, e.sample_index) for e in played] == [(c.case_id, s) for c in cases for s in range(2)]
    assert all(e.done and e.policy.model == "tiny" and e.policy.sampling.temperature == 1.0 for e in played)
    for ep in played:
        for t in ep.turns:  # the ids the model saw and wrote, each turn's context growing from the last
            assert t.prompt_token_ids and t.response_token_ids is not None and len(t.response_token_ids) <= 6
        for a, b in zip(ep.turns, ep.turns[1:], strict=False):
            assert b.prompt_token_ids[:len(a.prompt_token_ids)] == a.prompt_token_ids
    again = play_model(tiny_model, cases, rl_world, config, sampling, samples=2, batch=4, seed=7, name="tiny")
    assert [t.response_token_ids for e in again for t in e.turns] == \
        [t.response_token_ids for e in played for t in e.turns]
    other = play_model(tiny_model, cases, rl_world, config, sampling, samples=2, batch=4, seed=8, name="tiny")
    assert [t.response_token_ids for e in other for t in e.turns] != \
        [t.response_token_ids for e in played for t in e.turns]

    # greedy: every sample of a case writes the same first reply (its first context is the same)
    greedy = play_model(tiny_model, cases, rl_world, config, TurnSampling(temperature=0.0, max_new_tokens=6),
                        samples=2, seed=1)
    for i in range(0, len(greedy), 2):
        assert greedy[i].turns[0].response_token_ids == greedy[i + 1].turns[0].response_token_ids

    # the model's episodes pair with a baseline's on the same cases and samples
    baseline = run_agent(RandomExamsAgent.fit(rl_train, seed=0), cases, rl_world, config, samples=2)
    report = build_report({"random": baseline, "tiny": played}, len(cases), rl_world, config, samples=2)
    assert [c.a for c in report.comparisons] == ["tiny"] and report.comparisons[0].cases == 3


def test_a_model_plays_into_validated_shards_resumes_and_draws_alike_in_any_batch(rl_train, rl_world, tiny_model,
                                                                                  tmp_path):
    from components.rollout.store import load_episodes_dir, shard_paths

    cases, config = rl_train[:3], DiagEnvConfig(max_turns=2)
    sampling = TurnSampling(temperature=1.0, max_new_tokens=6)

    def ids(episodes):
        return [(e.episode_id, [t.response_token_ids for t in e.turns]) for e in episodes]

    whole = play_model(tiny_model, cases, rl_world, config, sampling, samples=2, batch=4, seed=7, name="tiny")
    # one episode at a time draws the same tokens: each episode's draws are seeded by itself, not by its batch
    assert ids(play_model(tiny_model, cases, rl_world, config, sampling, samples=2, batch=1, seed=7)) == ids(whole)
    play_model(tiny_model, cases[:1], rl_world, config, sampling, samples=2, seed=7, out_dir=tmp_path)  # stopped early
    [first] = shard_paths(tmp_path)
    kept = first.read_bytes()
    resumed = play_model(tiny_model, cases, rl_world, config, sampling, samples=2, seed=7, out_dir=tmp_path)
    assert ids(resumed) == ids(whole) and first.read_bytes() == kept and len(shard_paths(tmp_path)) == 2
    assert len(load_episodes_dir(tmp_path, strict=True)) == 6  # every episode once, in shards the suite accepts


def test_a_checkpoint_plays_on_the_backend_asked_for_with_its_own_options_on_top():
    hf = model_policy("ckpt", dtype="bfloat16", batch=8, max_context=1024).backend_config()
    assert (hf.model, hf.dtype, hf.max_context, hf.max_batch, hf.kv_cache_episodes) == ("ckpt", "bfloat16", 1024, 8, 8)
    vllm = model_policy("ckpt", "vllm", {"enforce_eager": True, "dtype": "float32", "model": "other"}, dtype="bfloat16",
                        batch=8, max_context=1024)
    c = vllm.backend_config()
    assert vllm.backend == "vllm" and (c.model, c.dtype, c.max_model_len, c.enforce_eager, c.concurrency) == \
        ("ckpt", "float32", 1024, True, 8)
