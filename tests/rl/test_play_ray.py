"""DiagGym evaluation on Ray actors: the same episodes as the local engine for the same seeds, the driver the only
writer of the EpisodeStore, a rerun resuming from it."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest

from components.diag.env import DiagEnvConfig
from components.diag.oracle import OraclePolicy
from components.rl.multiturn import TurnSampling
from components.rl.play import DiagEnvSpec, play_model, play_policy
from components.rollout.jobs import SamplingPlan, plan_jobs
from components.rollout.play import play_jobs
from components.rollout.ray_envs import RayPlay, play_jobs_on_ray
from components.rollout.store import load_episodes_dir, shard_paths

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[None]:
    """One private instance for the module: each play would otherwise start and stop its own."""
    from components.rollout.ray_workers import init_ray

    started = init_ray("local", 2)
    yield
    if started:
        ray.shutdown()


def record(episodes) -> list:
    return [(e.episode_id, e.outcome, e.diag.model_dump() if e.diag else None,
             [(t.raw_text, t.prompt_token_ids, t.response_token_ids) for t in e.turns]) for e in episodes]


def test_two_actors_play_the_oracle_as_the_local_engine_does_and_resume(ray_instance, rl_train, rl_world, tmp_path):
    cases, config = rl_train[:5], DiagEnvConfig(max_turns=4)
    jobs = plan_jobs(cases, SamplingPlan(k=2, first_temperature=0.0, temperature=0.0))
    env = DiagEnvSpec(rl_world, config)
    local = play_jobs(OraclePolicy(config), env, jobs, tmp_path / "local")
    assert local.played == 10 and all(e.outcome == "correct" for e in local.episodes[:2])

    on_ray = RayPlay(workers=2, chunk=2)
    oracle = functools.partial(OraclePolicy, config)  # an actor builds its own from this
    half = play_jobs_on_ray(oracle, env, jobs[:4], tmp_path / "ray", ray=on_ray)
    assert half.played == 4
    kept = [p.read_bytes() for p in shard_paths(tmp_path / "ray")]
    whole = play_jobs_on_ray(oracle, env, jobs, tmp_path / "ray", ray=on_ray)
    assert (whole.played, whole.skipped, whole.failed) == (6, 4, 0)
    assert [p.read_bytes() for p in shard_paths(tmp_path / "ray")][: len(kept)] == kept  # resumed, not rewritten
    assert record(whole.episodes) == record(local.episodes)
    stored = load_episodes_dir(tmp_path / "ray", strict=True)
    assert sorted(e.episode_id for e in stored) == sorted(e.episode_id for e in local.episodes)  # each once

    again = play_jobs_on_ray(oracle, env, jobs, tmp_path / "ray", ray=on_ray)
    assert (again.played, again.skipped) == (0, 10)


@pytest.mark.slow
def test_a_model_on_two_actors_samples_the_tokens_it_samples_here(ray_instance, rl_train, rl_world, tiny_model,
                                                                   tmp_path):
    cases, config = rl_train[:3], DiagEnvConfig(max_turns=2)
    sampling = TurnSampling(temperature=1.0, max_new_tokens=6)
    here = play_model(tiny_model, cases, rl_world, config, sampling, samples=2, batch=4, seed=7, name="tiny")
    there = play_model(tiny_model, cases, rl_world, config, sampling, samples=2, batch=4, seed=7, name="tiny",
                       ray=RayPlay(workers=2, chunk=2), out_dir=tmp_path)
    assert record(there) == record(here) and all(e.policy.model == "tiny" for e in there)
    assert len(load_episodes_dir(tmp_path, strict=True)) == 6


def test_bad_ray_settings_and_repeated_jobs_are_refused(rl_train, rl_world):
    with pytest.raises(ValueError, match="workers"):
        RayPlay(workers=0)
    with pytest.raises(ValueError, match="repeat"):
        play_policy(functools.partial(OraclePolicy, DiagEnvConfig()), [rl_train[0], rl_train[0]], rl_world,
                    ray=RayPlay())
