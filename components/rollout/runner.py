"""How a collection plays its jobs, whichever runner: its settings, the warm sandboxes its episodes draw from and
one scheduler over a list of jobs. `run_local` plays them on this process's threads; a Ray actor
(ray_workers.py) plays its chunks with the same pieces, so neither runner imports the collection that drives it
(collect.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from components.envs.coding_env import CodingEnv, EnvConfig
from components.envs.episode import Episode
from components.policies.protocol import Policy
from components.policies.registry import PolicyConfig
from components.rollout.jobs import RolloutJob, SamplingPlan
from components.rollout.scheduler import RolloutScheduler, SchedulerStats
from components.rollout.store import COMMIT_EVERY_S
from components.sandbox.protocol import Limits, Sandbox
from components.sandbox.warm import sandbox_supply


class CollectionConfig(BaseModel):
    """How to collect: who plays, how often per task, and how much runs at once."""

    model_config = ConfigDict(extra="forbid")

    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    plan: SamplingPlan = Field(default_factory=SamplingPlan)
    split: str | None = Field(default=None, description="only tasks of this split (None: all)")
    limit: int | None = Field(default=None, ge=1, description="at most this many tasks, spread over categories")
    categories: list[str] | None = Field(default=None, description="only tasks of these categories (None: all)")
    workers: int = Field(default=2, ge=1, description="environment steps run at once (local threads or Ray actors)")
    max_in_flight: int = Field(default=32, ge=1, description="episodes alive at once (the model's batch)")
    ray_address: str | None = Field(default=None, description="'local' or a cluster address: run on Ray actors")
    gpus_per_worker: float = Field(default=0, ge=0, description="GPUs each Ray actor asks for: what its policy uses "
                                   "(vllm: engines x tensor_parallel_size). Ray shows an actor only the GPUs it asked for")
    sandbox_backend: Literal["process", "docker", "auto"] = "auto"
    limits: Limits = Field(default_factory=Limits)
    env: EnvConfig = Field(default_factory=EnvConfig)
    shard_size: int = Field(default=64, ge=1)
    commit_every_s: float = Field(default=COMMIT_EVERY_S, ge=0, description="finished episodes are committed in "
                                  "batches at most this far apart (0: each as it ends); a kill loses at most these")


def collection_sandboxes(config: CollectionConfig) -> contextlib.AbstractContextManager[Callable[[], Sandbox]]:
    """The warm sandbox supply a collection's episodes draw from, sized to its workers."""
    limits = config.limits.model_copy(update={"timeout_s": config.env.exec_timeout_s})
    return sandbox_supply(config.sandbox_backend, limits, stateful=config.env.stateful, warm=config.workers + 1)


def run_jobs(policy: Policy, jobs: list[RolloutJob], task_root: Path, config: CollectionConfig,
             on_finished: Callable[[list[Episode]], None], sandboxes: Callable[[], Sandbox]) -> SchedulerStats:
    """One scheduler over `jobs` with sandboxes from `sandboxes`."""
    scheduler = RolloutScheduler(policy, lambda: CodingEnv(task_root, sandboxes, config.env), workers=config.workers,
                                 max_in_flight=config.max_in_flight)
    return scheduler.run(jobs, on_finished)


def run_local(policy: Policy, jobs: list[RolloutJob], task_root: Path, config: CollectionConfig,
              on_finished: Callable[[list[Episode]], None]) -> SchedulerStats:
    """The local runner: every job on this process's threads, with a supply of sandboxes opened for them."""
    if not jobs:
        return SchedulerStats()
    with collection_sandboxes(config) as supply:
        return run_jobs(policy, jobs, task_root, config, on_finished, supply)
