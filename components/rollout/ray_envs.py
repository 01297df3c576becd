"""Jobs of any environment played on Ray actors: the engine's Ray path for everything that is not a coding collection
(DiagGym evaluation; the coding collection keeps its own actors with warm sandboxes, ray_workers.py).

An actor cannot be handed a live environment or policy, so it gets recipes it rebuilds them from: the policy as a
PolicyConfig (built by the registry, e.g. each actor loads its own hf model) or a picklable callable returning a
Policy (the DiagGym oracle), and the environment as a picklable callable returning a fresh Env per episode (for
DiagEnv: components.rl.play.DiagEnvSpec, the world model, settings and catalogue). The driver hands out small
chunks of jobs and is the only writer of the EpisodeStore (components.rollout.play.store_played), so a resumed run
skips what is stored, nothing is written twice and a lost actor costs only its chunk. Seeds are per episode
(components.rollout.jobs.episode_seed), so which actor plays a job does not change what it draws.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.envs.episode import Episode
from components.envs.protocol import Env
from components.policies.protocol import Policy
from components.policies.registry import PolicyConfig, build_policy
from components.rollout.jobs import RolloutJob
from components.rollout.play import PlayResult, store_played
from components.rollout.ray_workers import deal_chunks, init_ray
from components.rollout.scheduler import RolloutScheduler, SchedulerStats
from components.rollout.store import SHARD_SIZE

PolicySpec = PolicyConfig | Callable[[], Policy]


@dataclass(frozen=True)
class RayPlay:
    """Where and how wide: `address` 'local' (a private instance on this machine) or a cluster's."""

    address: str = "local"
    workers: int = 2  # actors, each with its own policy
    chunk: int = 4  # jobs handed to an actor at once: small, so a lost actor costs little and the load evens out

    def __post_init__(self) -> None:
        if self.workers < 1 or self.chunk < 1:
            raise ValueError(f"RayPlay: workers ({self.workers}) and chunk ({self.chunk}) must be at least 1")


class _EnvWorker:
    def __init__(self, policy: PolicySpec, env_factory: Callable[[], Env], model_id: str | None, max_in_flight: int,
                 min_new_tokens: int):
        self.policy = build_policy(policy) if isinstance(policy, PolicyConfig) else policy()
        if model_id is not None:  # what the episodes call the model, as the driver would have named it
            self.policy.model_id = model_id
        self.env_factory = env_factory
        self.max_in_flight, self.min_new_tokens = max_in_flight, min_new_tokens

    def play(self, jobs: list[RolloutJob]) -> tuple[list[dict[str, Any]], int, list[str]]:
        done: list[Episode] = []
        # a scheduler per chunk: its stats are this chunk's
        scheduler = RolloutScheduler(self.policy, self.env_factory, workers=1, max_in_flight=self.max_in_flight,
                                     min_new_tokens=self.min_new_tokens)
        stats = scheduler.run(jobs, done.extend)
        return [e.model_dump(mode="json") for e in done], stats.failed, stats.errors

    def close(self) -> None:
        self.policy.close()


def run_env_jobs_on_ray(policy: PolicySpec, env_factory: Callable[[], Env], jobs: list[RolloutJob],
                        on_finished: Callable[[list[Episode]], None], ray: RayPlay, *, model_id: str | None = None,
                        max_in_flight: int = 32, min_new_tokens: int = 16) -> SchedulerStats:
    """Play `jobs` on `ray.workers` actors, handing each chunk's episodes to `on_finished` in this process."""
    import ray as ray_api

    stats = SchedulerStats()
    if not jobs:
        return stats
    started_here = init_ray(ray.address, ray.workers)
    try:
        actor_cls = ray_api.remote(num_cpus=1)(_EnvWorker)
        actors = [actor_cls.remote(policy, env_factory, model_id, max_in_flight, min_new_tokens)
                  for _ in range(min(ray.workers, len(jobs)))]
        deal_chunks(actors, jobs, ray.chunk, on_finished, stats)
    finally:
        if started_here:
            ray_api.shutdown()
    return stats


def play_jobs_on_ray(policy: PolicySpec, env_factory: Callable[[], Env], jobs: Sequence[RolloutJob],
                     out_dir: Path | str | None = None, *, ray: RayPlay | None = None, model_id: str | None = None,
                     max_in_flight: int = 32, min_new_tokens: int = 16, shard_size: int = SHARD_SIZE,
                     strict: bool = True, on_progress: Callable[[list[Episode]], None] | None = None) -> PlayResult:
    """components.rollout.play.play_jobs on Ray actors: the same episodes, store, resume and errors."""
    ray = ray or RayPlay()

    def run(todo: list[RolloutJob], on_finished: Callable[[list[Episode]], None]) -> SchedulerStats:
        return run_env_jobs_on_ray(policy, env_factory, todo, on_finished, ray, model_id=model_id,
                                   max_in_flight=max_in_flight, min_new_tokens=min_new_tokens)

    return store_played(run, jobs, out_dir, shard_size=shard_size, strict=strict, on_progress=on_progress)
