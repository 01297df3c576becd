"""Rollouts on Ray: one actor per worker, each with its own policy, sandbox supply and scheduler.

The driver hands out small chunks of jobs and commits each chunk's episodes as it comes back, so the driver
stays the only writer of the store (no duplicates) and a lost actor costs only its chunk. `ray_address`
'local' starts a private Ray instance on this machine (state under .state/ray, no dashboard, no usage stats).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from components.common.paths import PROJECT_ROOT
from components.envs.episode import Episode
from components.rollout.jobs import RolloutJob
from components.rollout.runner import CollectionConfig, collection_sandboxes, run_jobs
from components.rollout.scheduler import SchedulerStats


class _Worker:
    def __init__(self, config_json: str, task_root: str):
        from components.policies.registry import build_policy

        config = CollectionConfig.model_validate_json(config_json)
        self.config = config.model_copy(update={"workers": 1, "ray_address": None})
        self.task_root = Path(task_root)
        self.policy = build_policy(self.config.policy)
        self._stack = contextlib.ExitStack()
        self.sandboxes = self._stack.enter_context(collection_sandboxes(self.config))  # kept warm across chunks

    def devices(self) -> str:
        """The GPUs Ray gave this actor (what it asked for with num_gpus; none: an empty string)."""
        return os.environ.get("CUDA_VISIBLE_DEVICES", "")

    def play(self, jobs: list[RolloutJob]) -> tuple[list[dict[str, Any]], int, list[str]]:
        done: list[Episode] = []
        stats = run_jobs(self.policy, jobs, self.task_root, self.config, done.extend, self.sandboxes)
        return [e.model_dump(mode="json") for e in done], stats.failed, stats.errors

    def close(self) -> None:
        self._stack.close()
        self.policy.close()


def run_on_ray(jobs: list[RolloutJob], task_root: Path, config: CollectionConfig,
               on_finished: Callable[[list[Episode]], None], chunk: int = 4) -> SchedulerStats:
    import ray

    stats = SchedulerStats()
    if not jobs:
        return stats
    started_here = init_ray(config.ray_address, config.workers)
    try:
        gpus = config.gpus_per_worker
        have = float(ray.cluster_resources().get("GPU", 0))
        if gpus * config.workers > have:
            # Ray would keep the actors pending for ever, waiting for GPUs that never come
            raise ValueError(f"the collection asks for {config.workers} workers x {gpus:g} GPUs, the Ray cluster has "
                             f"{have:g} GPUs: lower workers or gpus_per_worker")
        # an actor that asks for no GPU sees none (Ray empties its CUDA_VISIBLE_DEVICES)
        actor_cls = ray.remote(num_cpus=1, num_gpus=gpus)(_Worker)
        actors = [actor_cls.remote(config.model_dump_json(), str(task_root)) for _ in range(config.workers)]
        if gpus:
            stats.devices = ray.get([a.devices.remote() for a in actors])
        deal_chunks(actors, jobs, chunk, on_finished, stats)
    finally:
        if started_here:
            ray.shutdown()
    return stats


def deal_chunks(actors: list[Any], jobs: list[RolloutJob], chunk: int, on_finished: Callable[[list[Episode]], None],
                stats: SchedulerStats) -> None:
    """Hand `jobs` out `chunk` at a time to whichever actor is free (each has `play(jobs)` returning (episodes as
    dicts, failed, errors)), pass each chunk's episodes to `on_finished` here, then close the actors: the driver
    stays the only writer of the store."""
    import ray

    chunks = [jobs[i : i + chunk] for i in range(0, len(jobs), chunk)]
    running: dict[Any, Any] = {}
    free = list(actors)
    while chunks or running:
        while free and chunks:
            actor = free.pop()
            running[actor.play.remote(chunks.pop(0))] = actor
        ready, _ = ray.wait(list(running), num_returns=1)
        for ref in ready:
            free.append(running.pop(ref))
            episodes, failed, errors = ray.get(ref)
            stats.failed += failed
            stats.errors += errors[: max(0, 20 - len(stats.errors))]
            if episodes:
                on_finished([Episode.model_validate(e) for e in episodes])
    ray.get([a.close.remote() for a in actors])


def init_ray(address: str, workers: int) -> bool:
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address == "local":
        tmp = PROJECT_ROOT / ".state" / "ray"
        tmp.mkdir(parents=True, exist_ok=True)
        with contextlib.redirect_stdout(None):
            ray.init(num_cpus=max(workers, os.cpu_count() or 1), include_dashboard=False, _temp_dir=str(tmp),
                     log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": str(PROJECT_ROOT)}})
    else:
        ray.init(address=address, log_to_driver=False)
    return True
