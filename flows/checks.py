"""Checks on built data that need the environment: every held-out task solvable through it."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from components.common.paths import PROJECT_ROOT
from components.envs.solvability import check_solvability
from components.profile.config import PipelineConfig, as_config
from components.sandbox.warm import sandbox_supply
from components.tasks.record import load_tasks
from components.tracking.tracker import MlflowTracker


@flow(name="check-solvability", log_prints=True)
def solvability_flow(tasks_path: Path, profile: str | PipelineConfig = "demo", split: str = "test") -> dict:
    """A scripted agent runs each task's reference code through the coding environment and submits its output."""
    cfg = as_config(profile)
    tasks = [t for t in load_tasks(tasks_path) if t.split == split]
    env_cfg = cfg.env.model_copy(update={"max_turns": 2, "stateful": False})
    limits = cfg.sandbox.limits.model_copy(update={"timeout_s": env_cfg.exec_timeout_s})
    with sandbox_supply(cfg.sandbox.backend, limits) as supply:
        report = check_solvability(tasks, Path(tasks_path).parent, supply, env_cfg)
    with MlflowTracker(cfg.tracking, PROJECT_ROOT).run(
            f"solvability-{split}", tags={"medgym.stage": "data.solvability", "medgym.profile": cfg.profile}) as run:
        run.log(params={"tasks": str(tasks_path), "split": split, "backend": cfg.sandbox.backend},
                metrics={"episodes": report.episodes, "solved": report.solved, "rate": report.rate,
                         **{f"rate_{d}": s / n for d, (n, s) in report.by_domain.items() if n}})
    if report.solved != report.episodes:
        raise ValueError(f"{report.episodes - report.solved} of {report.episodes} {split} tasks in {tasks_path} "
                         f"cannot be solved through the environment: {report.failures}")
    return {"episodes": report.episodes, "solved": report.solved, "by_domain": report.by_domain}
