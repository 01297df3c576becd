"""The coding environment as GRPO's gym (components.rl.grpo.Gym): train tasks played in CodingEnv, the sandbox in
the loop, each episode rewarded by its task's checker.

An episode's reward is CodingEnv's: 1.0 when the task's checker accepts the answer the episode submitted, 0.0
otherwise (nothing submitted, a wrong answer, the turn limit, the context). What the agent prints, and any reward or
verdict its text claims, never reaches it: the checker's reason stays in `Episode.check`, and the rollout hands TRL
`Episode.reward` (components.rl.grpo.samples_columns). Each step's episodes draw fresh sandboxes from one supply
opened for the step and closed after it, so no sandbox outlives the generation it served.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Literal

from components.envs.coding_env import CodingEnv, EnvConfig
from components.envs.episode import Episode
from components.envs.protocol import Env
from components.sandbox.protocol import Limits
from components.sandbox.warm import sandbox_supply
from components.tasks.record import Task


class CodingGym:
    """CodingEnv over tasks whose context files are under `task_root` (the task file's folder)."""

    name = "coding"

    def __init__(self, tasks: Sequence[Task], task_root: Path, env_config: EnvConfig | None = None,
                 backend: Literal["process", "docker", "auto"] = "auto", limits: Limits | None = None):
        held = next((t for t in tasks if t.split != "train"), None)
        if held is not None:  # GRPO learns from every task it plays: a valid or test task would leak into the policy
            raise ValueError(f"GRPO trains on train tasks only; task {held.task_id!r} is of split {held.split!r}")
        self.items, self.task_root = list(tasks), Path(task_root)
        self.env_config, self.backend, self.limits = env_config or EnvConfig(), backend, limits or Limits()

    @contextlib.contextmanager
    def envs(self, max_turns: int) -> Iterator[Callable[[], Env]]:
        config = self.env_config.model_copy(update={"max_turns": max_turns})
        limits = self.limits.model_copy(update={"timeout_s": config.exec_timeout_s})
        with sandbox_supply(self.backend, limits, stateful=config.stateful) as sandboxes:
            yield lambda: CodingEnv(self.task_root, sandboxes, config)

    def correct(self, episode: Episode) -> bool:
        return bool(episode.check and episode.check.correct)
