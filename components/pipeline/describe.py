"""The dry run: what `medgym pipeline run` would do on a profile, stage by stage, without doing any of it.

For a paper-scale profile this is the check before a GPU node is booked: the model, how many tasks and episodes
each rollout plays, the launch command of each training stage (accelerate with its DeepSpeed config and process
count), and which stages a rerun would take from the cache. Each kind says what it shows of its stages
(`StageKind.details`, components/pipeline/kinds/).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from components.pipeline.kinds import kind_of
from components.pipeline.plan import Plan
from components.pipeline.state import PipelineState, decide, stage_key


def describe(plan: Plan, state: PipelineState, root: Path) -> list[dict[str, Any]]:
    tasks = _task_counts(root / plan.cfg.data.out_dir / "tasks.jsonl")
    keys: dict[str, str] = {}
    rows = []
    for stage in plan.stages:
        keys[stage.name] = stage_key(plan, stage, keys, root)
        row: dict[str, Any] = {"stage": stage.name, "kind": stage.kind, "needs": list(stage.needs),
                               "cache": decide(plan, state, stage, keys, root)}
        row.update(kind_of(stage.kind).details(plan, stage, tasks))
        rows.append(row)
    return rows


def _task_counts(path: Path) -> Counter[tuple[str, str]] | None:
    if not path.is_file():
        return None
    from components.tasks.record import load_tasks

    return Counter((t.split, t.category) for t in load_tasks(path))
