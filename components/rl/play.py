"""A checkpoint played in DiagEnv for evaluation, many episodes at once, by the rollout engine with any policy of
the registry (hf by default, vllm for a server's batching), on this process or on Ray actors.

The engine (components.rollout.play) keeps every waiting episode's next turn in one batch and each context as exact
ids (the ids sampled and the observation's ids, never re-tokenized); the hf policy keeps an episode's keys and
values between turns, so a turn computes only its new tokens, and the vllm policy sends the ids as they are. Sample
i of a case sees the environment's draws for sample i, as the baselines do (components.diag.evaluate), so the
episodes pair with theirs; the model's draws are seeded per episode from `seed`, the case and the sample
(components.rollout.jobs.episode_seed), so they do not depend on the batch, the backend's batching or the actor.
With `out_dir` the episodes land in an EpisodeStore there (this process its only writer, Ray or not) and a rerun
resumes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.diag.catalogue import Catalogue
from components.diag.env import DiagEnv, DiagEnvConfig
from components.diag.record import Case
from components.diag.world import WorldModel
from components.envs.episode import Episode
from components.policies.protocol import Policy
from components.policies.registry import Backend, PolicyConfig, build_policy
from components.rl.multiturn import TurnSampling
from components.rollout.jobs import SamplingPlan, plan_jobs
from components.rollout.play import play_jobs
from components.rollout.ray_envs import PolicySpec, RayPlay, play_jobs_on_ray


@dataclass(frozen=True)
class DiagEnvSpec:
    """A fresh DiagEnv per call, from parts that pickle: what a Ray actor rebuilds the environment from."""

    world: WorldModel
    config: DiagEnvConfig | None = None
    catalogue: Catalogue | None = None

    def __call__(self) -> DiagEnv:
        return DiagEnv(self.world, self.config, self.catalogue)


def model_policy(model: str | Path, backend: Backend = "hf", options: dict[str, Any] | None = None, *,
                 dtype: str = "float32", batch: int = 64, max_context: int = 4096) -> PolicyConfig:
    """The registry's config that plays checkpoint `model` on `backend`; `options` (the backend's own fields)
    override what is derived here."""
    derived: dict[str, Any]
    if backend == "hf":
        derived = {"dtype": dtype, "max_context": max_context, "max_batch": batch, "kv_cache_episodes": batch}
    elif backend == "vllm":
        derived = {"dtype": dtype, "max_model_len": max_context, "concurrency": batch}
    else:
        derived = {}
    return PolicyConfig(backend=backend, options={**derived, **(options or {}), "model": str(model)})


def play_model(model: str | Path, cases: Sequence[Case], world: WorldModel, config: DiagEnvConfig | None = None,
               sampling: TurnSampling | None = None, *, samples: int = 1, batch: int = 64, seed: int = 0,
               dtype: str = "float32", name: str | None = None, catalogue: Catalogue | None = None,
               out_dir: Path | str | None = None, progress: Callable[[str], None] | None = None,
               backend: Backend = "hf", policy_options: dict[str, Any] | None = None,
               ray: RayPlay | None = None) -> list[Episode]:
    """`samples` episodes of each case played by the checkpoint (or embedded model name) `model` on `backend`, up
    to `batch` at a time, in (case, sample) order."""
    sampling = sampling or TurnSampling()
    policy = model_policy(model, backend, policy_options, dtype=dtype, batch=batch, max_context=sampling.max_context)
    return play_policy(policy, cases, world, config, sampling, samples=samples, batch=batch, seed=seed,
                       name=name or str(model), catalogue=catalogue, out_dir=out_dir, progress=progress, ray=ray)


def play_policy(policy: PolicySpec, cases: Sequence[Case], world: WorldModel, config: DiagEnvConfig | None = None,
                sampling: TurnSampling | None = None, *, samples: int = 1, batch: int = 64, seed: int = 0,
                name: str | None = None, catalogue: Catalogue | None = None, out_dir: Path | str | None = None,
                progress: Callable[[str], None] | None = None, ray: RayPlay | None = None) -> list[Episode]:
    """`samples` episodes of each case played by `policy` (a registry config, or a picklable callable returning a
    Policy), here or on `ray`'s actors, each actor with a policy of its own. `name` is what the episodes and the
    report call the model (None: the policy's own model id)."""
    sampling = sampling or TurnSampling()
    plan = SamplingPlan(k=samples, first_temperature=sampling.temperature, temperature=sampling.temperature,
                        top_p=sampling.top_p, max_new_tokens=sampling.max_new_tokens, seed=seed)
    jobs = plan_jobs(cases, plan)
    env = DiagEnvSpec(world, config, catalogue)
    finished: list[int] = [0]

    def tell(episodes: list[Episode]) -> None:
        finished[0] += len(episodes)
        if progress:
            progress(f"{name or 'model'}: {finished[0]}/{len(jobs)} episodes")

    if ray is not None:
        return play_jobs_on_ray(policy, env, jobs, out_dir, ray=ray, model_id=name, max_in_flight=batch,
                                on_progress=tell).episodes
    live: Policy = build_policy(policy) if isinstance(policy, PolicyConfig) else policy()
    if name is not None:
        live.model_id = name
    try:
        return play_jobs(live, env, jobs, out_dir, max_in_flight=batch, on_progress=tell).episodes
    finally:
        live.close()
