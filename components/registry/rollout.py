"""A coding rollout as an Evaluation: per-task success, the content hash of each task it played, its conditions.

A rollout folder does not name the task file it played, so the caller passes it (a profile's suite). Hashing the
file as it is now would attribute a rebuilt suite's tasks to episodes played on the old one; every played task's
prompt must therefore appear in the first observation its episodes were shown, or the evaluation is refused.

A decision reads what the leaderboard ranks: a rollout's greedy episodes (temperature 0, the headline's greedy
pass@1) where it has any, else its sampled ones, so greedy is compared with greedy and sampled with sampled only
(the conditions then say which: `k` and the temperatures of the episodes read).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from components.envs.episode import Episode
from components.registry.conditions import rollout_conditions
from components.registry.content import task_hashes
from components.registry.evaluation import Evaluation


def decided_on(episodes: Sequence[Episode]) -> list[Episode]:
    """The episodes a decision reads: the greedy ones where the rollout played any (its first samples at temperature
    0), else all of them, sampled."""
    greedy = [e for e in episodes if e.policy is not None and e.policy.sampling.temperature == 0]
    return greedy or list(episodes)


def rollout_evaluation(episodes: Sequence[Episode], tasks_file: Path, *, reference: str | None = None,
                       scores: Mapping[str, float] | None = None) -> Evaluation:
    """The evaluation of one rollout's `episodes`, whose tasks are those of `tasks_file`."""
    from components.evaluation.report import task_success
    from components.tasks.record import load_tasks

    where = reference or "the rollout"
    tasks = {t.task_id: t for t in load_tasks(tasks_file)}
    missing = sorted({e.task_id for e in episodes} - set(tasks))
    if missing:
        raise ValueError(f"{where}: {len(missing)} played task(s) are not in {tasks_file}, e.g. {missing[0]}: pass "
                         "the task file the rollout played")
    for e in episodes:
        if tasks[e.task_id].prompt.strip() not in e.first_observation:
            raise ValueError(f"{where}: episode {e.episode_id} was not shown the prompt of task {e.task_id} in "
                             f"{tasks_file}: the rollout played another version of that task file")
    episodes = decided_on(episodes)
    success = task_success(episodes)
    return Evaluation(task_success=success, task_hashes=task_hashes([tasks[t] for t in success], Path(tasks_file).parent),
                      conditions=rollout_conditions(episodes, {t.task_id: t.split for t in tasks.values()}),
                      reference=reference, scores=dict(scores or {}))
