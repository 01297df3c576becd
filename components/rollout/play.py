"""Jobs played by one policy in any environment, on this process's threads: the engine under every caller that is
not a coding collection (DiagGym play and evaluation, the DiagGym oracle's trajectories).

With `out_dir` the episodes land in an EpisodeStore there (validated shards, each committed as it finishes) and a
rerun plays only what the folder does not hold yet; without it they are kept in memory. Either way the episodes
come back in the order of `jobs`. An episode lost to an error (a world model that raised, a broken sandbox) is
not written; `strict` then raises after the others are stored, so a figure is never computed over fewer episodes
than were asked for (a rerun plays the lost ones). `store_played` is that bookkeeping for any runner: this
process's scheduler here, Ray actors in components.rollout.ray_envs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from components.envs.episode import Episode
from components.envs.protocol import Env
from components.policies.protocol import Policy
from components.rollout.jobs import RolloutJob
from components.rollout.scheduler import RolloutScheduler, SchedulerStats
from components.rollout.store import COMMIT_EVERY_S, SHARD_SIZE, EpisodeStore, PacedCommits

# plays jobs, handing each finished batch of episodes to the callback as it comes
Runner = Callable[[list[RolloutJob], Callable[[list[Episode]], None]], SchedulerStats]


class EpisodesLost(RuntimeError):
    """Some episodes raised in their environment; the rest are stored and a rerun plays the lost ones."""


@dataclass
class PlayResult:
    episodes: list[Episode]  # every episode of `jobs` the folder holds (or this run played), in job order
    played: int  # this run
    skipped: int  # already in the folder
    failed: int
    errors: list[str] = field(default_factory=list)


def play_jobs(policy: Policy, env_factory: Callable[[], Env], jobs: Sequence[RolloutJob], out_dir: Path | str | None = None,
              *, workers: int = 1, max_in_flight: int = 32, min_new_tokens: int = 16, shard_size: int = SHARD_SIZE,
              strict: bool = True, on_progress: Callable[[list[Episode]], None] | None = None) -> PlayResult:
    """Play `jobs` with `policy`, each episode on a fresh environment from `env_factory`. A turn whose context
    leaves less than `min_new_tokens` of the policy's context ends its episode (context_limit)."""
    scheduler = RolloutScheduler(policy, env_factory, workers=workers, max_in_flight=max_in_flight,
                                 min_new_tokens=min_new_tokens)
    return store_played(scheduler.run, jobs, out_dir, shard_size=shard_size, strict=strict, on_progress=on_progress)


def store_played(run: Runner, jobs: Sequence[RolloutJob], out_dir: Path | str | None = None, *,
                 shard_size: int = SHARD_SIZE, strict: bool = True,
                 on_progress: Callable[[list[Episode]], None] | None = None) -> PlayResult:
    """`jobs` played by `run` (this process's scheduler, or Ray actors: components.rollout.ray_envs), this process
    the only writer of `out_dir`'s store whichever plays them."""
    order = {job.key: i for i, job in enumerate(jobs)}
    if len(order) != len(jobs):
        raise ValueError("jobs repeat a (task, sample) pair")
    if out_dir is None:
        kept: list[Episode] = []

        def finished(episodes: list[Episode]) -> None:
            kept.extend(episodes)
            if on_progress is not None:
                on_progress(episodes)

        stats = run(list(jobs), finished)
        played, skipped = len(jobs), 0
    else:
        with EpisodeStore(out_dir, shard_size=shard_size) as store:
            done = store.done_keys()
            todo = [job for job in jobs if job.key not in done]

            with PacedCommits(store, COMMIT_EVERY_S, on_progress) as commit:
                stats = run(todo, commit)
            kept = [e for e in store.episodes() if (e.task_id, e.sample_index) in order]
        played, skipped = len(todo), len(jobs) - len(todo)
    if strict and stats.failed:
        raise EpisodesLost(f"{stats.failed} of {played} episodes were lost ({'; '.join(stats.errors[:3])})"
                           + (f"; the others are in {out_dir}, and a rerun plays the lost ones" if out_dir else ""))
    kept.sort(key=lambda e: order[(e.task_id, e.sample_index)])
    return PlayResult(episodes=kept, played=played, skipped=skipped, failed=stats.failed, errors=stats.errors)
