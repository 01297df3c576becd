"""One collection: K episodes per task by one policy, written once each into validated shards; resumable.

Plain Python (no Prefect): `flows/rollout.py` adds tracking and the CLI. Episodes run on local threads by
default (the sandboxes are separate processes already) or on Ray actors when a cluster address is given; both
runners play their jobs the same way (runner.py).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from components.envs.episode import Episode
from components.policies.protocol import Policy
from components.policies.registry import build_policy, refusal
from components.rollout.jobs import plan_jobs
from components.rollout.metrics import summarize
from components.rollout.runner import CollectionConfig, run_local
from components.rollout.store import EpisodeStore, PacedCommits
from components.tasks.record import Task, load_tasks

log = logging.getLogger(__name__)


class CollectionResult(BaseModel):
    out_dir: str
    planned: int  # episodes this run set out to play (after skipping finished ones)
    skipped: int  # finished by an earlier run
    refused: dict[str, str]  # task_id -> why the policy cannot play it
    failed: int  # lost to infrastructure errors this run (played again on resume)
    errors: list[str]
    rejected_shards: list[str]
    summary: dict[str, float]  # over every valid episode in the folder
    elapsed_s: float
    # the first episodes of the folder, for a tracker's artifacts (left out of dumps: the shards hold them all)
    sample: list[Episode] = Field(default_factory=list, exclude=True)


def select_tasks(tasks: Sequence[Task], split: str | None, limit: int | None,
                 categories: Sequence[str] | None = None) -> list[Task]:
    """The tasks of `split` (and `categories`); with `limit`, taken round-robin over categories so that every
    domain is played."""
    if categories is not None:
        unknown = sorted(set(categories) - {t.category for t in tasks})
        if unknown:
            raise ValueError(f"categories not in the task suite: {', '.join(unknown)}")
    chosen = [t for t in tasks if (split is None or t.split == split)
              and (categories is None or t.category in categories)]
    if limit is None or limit >= len(chosen):
        return chosen
    by_cat: dict[str, list[Task]] = defaultdict(list)
    for t in chosen:
        by_cat[t.category].append(t)
    # interleave domains first (the n-th category of every domain before the n+1-th of any), then categories
    rank: dict[str, int] = {}
    per_domain: dict[str, int] = defaultdict(int)
    for cat in sorted(by_cat):
        dom = by_cat[cat][0].domain.value
        rank[cat] = per_domain[dom]
        per_domain[dom] += 1
    queues = [iter(by_cat[c]) for c in sorted(by_cat, key=lambda c: (rank[c], by_cat[c][0].domain.value, c))]
    out: list[Task] = []
    while len(out) < limit:
        for q in queues:
            t = next(q, None)
            if t is not None and len(out) < limit:
                out.append(t)
    return out


def collect(tasks_path: Path, out_dir: Path, config: CollectionConfig,
            on_progress: Callable[[list[Episode]], None] | None = None,
            policy: Policy | None = None, total_hook: Callable[[int], None] | None = None,
            sample_size: int = 0) -> CollectionResult:
    """Play every (task, sample) of `config` not already in `out_dir`; `policy` reuses a built one."""
    started = time.monotonic()
    tasks = select_tasks(load_tasks(tasks_path), config.split, config.limit, config.categories)
    with EpisodeStore(out_dir, shard_size=config.shard_size) as store, _local_policy(config, policy) as player:
        done = store.done_keys()
        refused = _refusals(config, tasks)
        playable = [t for t in tasks if t.task_id not in refused]
        jobs = plan_jobs(playable, config.plan, skip=done)
        skipped = len(playable) * config.plan.k - len(jobs)
        if total_hook is not None:
            total_hook(len(jobs))

        with PacedCommits(store, config.commit_every_s, on_progress) as finished:
            if config.ray_address:
                from components.rollout.ray_workers import run_on_ray

                stats = run_on_ray(jobs, Path(tasks_path).parent, config, finished)
            else:
                stats = run_local(player, jobs, Path(tasks_path).parent, config, finished)
        episodes = list(store.episodes())
        rejected = [str(p) for p in store.rejected()]
    return CollectionResult(
        out_dir=str(out_dir), planned=len(jobs), skipped=skipped, refused=refused, failed=stats.failed,
        errors=stats.errors, rejected_shards=rejected, summary=summarize(episodes),
        elapsed_s=time.monotonic() - started, sample=episodes[:sample_size])


@contextlib.contextmanager
def _local_policy(config: CollectionConfig, policy: Policy | None) -> Iterator[Policy | None]:
    """The policy this process plays with: the one given, one built here, or None on Ray (actors build theirs)."""
    if policy is not None or config.ray_address:
        yield policy
        return
    built = build_policy(config.policy)
    try:
        yield built
    finally:
        built.close()


def _refusals(config: CollectionConfig, tasks: Sequence[Task]) -> dict[str, str]:
    refuse = refusal(config.policy)
    if refuse is None:
        return {}
    return {t.task_id: reason for t in tasks if (reason := refuse(t))}
