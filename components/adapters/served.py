"""Which tasks an adapter serves and how each episode runs: settings of the grader's side, never sent to a client."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from components.envs.coding_env import EnvConfig
from components.tasks.record import Task, load_tasks


class ServedTasks(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tasks: Path = Field(description="a tasks.jsonl; its context files are relative to its folder")
    split: str | None = Field(default=None, description="serve only the tasks of this split (train, valid, test)")
    env: EnvConfig = Field(default_factory=EnvConfig, description="turns, time limit per run, output shown")
    backend: Literal["process", "docker", "auto"] = Field(default="auto", description="the sandbox backend")
    max_action_chars: int = Field(
        default=64 * 1024, ge=1024,
        description="longest code, path or answer accepted from a client (the sandbox caps what it runs, not what it is sent)",
    )


class UnknownTask(LookupError):
    """The client named a task this server does not serve."""


class TaskBook:
    """The served tasks by id, read once and shared read-only by every episode of a server or trainer."""

    def __init__(self, settings: ServedTasks) -> None:
        tasks = load_tasks(settings.tasks)
        if settings.split is not None:
            tasks = [t for t in tasks if t.split == settings.split]
        if not tasks:
            raise ValueError(f"{settings.tasks}: no tasks" + (f" of split {settings.split!r}" if settings.split else ""))
        self.root = settings.tasks.resolve().parent
        self._tasks = {t.task_id: t for t in tasks}
        self._order = list(self._tasks)
        self._next = itertools.count()
        self._lock = threading.Lock()  # sessions start from server threads

    def __len__(self) -> int:
        return len(self._order)

    @property
    def ids(self) -> list[str]:
        return list(self._order)

    def get(self, task_id: str) -> Task:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise UnknownTask(f"no served task has id {task_id[:200]!r}") from None

    def pick(self, seed: int | None = None) -> Task:
        """The task a seed names (seed modulo the count), or without one the next in file order, round robin: a
        trainer without a dataset sees every task in turn."""
        if seed is None:
            with self._lock:
                seed = next(self._next)
        return self._tasks[self._order[seed % len(self._order)]]
