"""What an environment is: the contract the rollout engine plays, whichever gym it is.

Shape after SkyRL gym: `reset(task, sample_index) -> Observation`, `step(action) -> StepResult(observation, reward,
done, info)`, `close()`, and the `episode` it fills as it goes (the one `Episode` record every later stage reads).
`end_for_context(reason)` ends the episode before a model call that would not fit the model's context: the caller
knows the context, the environment keeps the record whole (outcome context_limit). `step` takes model text (parsed
by the environment, kept as the turn's raw text) or an action object of the environment's own kind.

The coding environment (components.envs.coding_env.CodingEnv: a Task, a sandbox) and DiagGym's
(components.diag.env.DiagEnv: a patient Case, a world model) both implement it, so one engine
(components.rollout) plays either with any policy.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from components.envs.episode import Episode


class Observation(BaseModel):
    text: str  # exactly what the agent is shown
    turn: int  # actions taken so far
    turns_left: int
    files: list[str] = Field(default_factory=list)  # the task's data files, where the environment has any


class StepResult(BaseModel):
    observation: Observation
    reward: float  # the episode's reward once done, 0.0 before
    done: bool
    info: dict[str, Any] = Field(default_factory=dict)  # never holds the truth (the grader's reason stays in the Episode)


@runtime_checkable
class Env(Protocol):
    """One episode at a time; `reset` starts the next."""

    @property
    def episode(self) -> Episode: ...

    def reset(self, task: Any, sample_index: int = 0) -> Observation: ...

    def step(self, action: Any) -> StepResult: ...

    def end_for_context(self, reason: str) -> None: ...

    def close(self) -> None: ...
