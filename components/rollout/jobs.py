"""What a collection plays: K samples per task, each with its own sampling parameters and seed.

A task is whatever the environment's `reset` takes (a coding Task, a DiagGym Case) and names itself by `task_id`.

As in the MedAgentGym paper the first sample of a task is greedy (temperature 0) and the rest are sampled
(0.6); both are configurable. Seeds are a pure function of (base seed, task id, sample index), so a rerun, a
resume or another worker draws the same episode.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from components.envs.episode import Sampling, episode_id


class Playable(Protocol):
    """What an environment resets to: a coding Task, a DiagGym Case."""

    @property
    def task_id(self) -> str: ...


class SamplingPlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    k: int = Field(default=1, ge=1, description="episodes per task")
    first_temperature: float = Field(default=0.0, ge=0, description="sample 0 (greedy in the paper)")
    temperature: float = Field(default=0.6, ge=0, description="samples 1..k-1")
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_new_tokens: int = Field(default=512, gt=0, description="per model call")
    seed: int = 0


@dataclass(frozen=True)
class RolloutJob:
    task: Any  # a Playable: what the environment's reset takes
    sample_index: int
    sampling: Sampling

    @property
    def key(self) -> tuple[str, int]:
        return (self.task.task_id, self.sample_index)

    @property
    def episode_id(self) -> str:
        return episode_id(self.task.task_id, self.sample_index)


def episode_seed(base: int, task_id: str, sample_index: int) -> int:
    digest = hashlib.sha256(f"{base}\x00{task_id}\x00{sample_index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def plan_jobs(tasks: Iterable[Playable], plan: SamplingPlan, skip: set[tuple[str, int]] | None = None) -> list[RolloutJob]:
    """Every (task, sample) not in `skip` (the pairs a resumed collection already holds)."""
    skip = skip or set()
    jobs = []
    for task in tasks:
        for i in range(plan.k):
            if (task.task_id, i) in skip:
                continue
            sampling = Sampling(temperature=plan.first_temperature if i == 0 else plan.temperature, top_p=plan.top_p,
                                max_new_tokens=plan.max_new_tokens, seed=episode_seed(plan.seed, task.task_id, i))
            jobs.append(RolloutJob(task=task, sample_index=i, sampling=sampling))
    return jobs
