"""The OpenEnv wire types of MedGym's coding environment: what a client sends and what it reads.

An observation carries what the agent is shown (the text), where it stands (turn, turns left) and the task's file
names; the reward and done travel beside it. Nothing in these types can hold the answer, the checker's reason or
the task record: the server builds them from `EpisodeSession.Reply`, which holds none of them either.
"""

from __future__ import annotations

from typing import Any, Literal

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class MedGymAction(Action):
    """One action, as the agent's JSON actions (components.envs.actions): fill the fields its type uses."""

    type: Literal["run_code", "inspect_data", "submit_answer"]
    code: str | None = Field(default=None, description="run_code: the Python source")
    path: str | None = Field(default=None, description="inspect_data: the file, relative to the working directory")
    column: str | None = Field(default=None, description='inspect_data: a column; "table.column" for SQLite')
    value: str | None = Field(default=None, description="inspect_data: a value to find among the column's")
    answer: Any = Field(default=None, description="submit_answer: the answer (for coding tasks the program)")

    def fields(self) -> dict[str, Any]:
        """The fields of this action's type, for components.adapters.session.env_action."""
        names = {"run_code": ("code",), "inspect_data": ("path", "column", "value"), "submit_answer": ("answer",)}
        return {n: getattr(self, n) for n in names[self.type] if n == "answer" or getattr(self, n) is not None}


class MedGymObservation(Observation):
    text: str = Field(default="", description="what the agent is shown: the task, or its action's result")
    task_id: str | None = None
    turn: int = Field(default=0, description="actions taken so far")
    turns_left: int = 0
    files: list[str] = Field(default_factory=list, description="the task's data files in the working directory")


class MedGymState(State):
    task_id: str | None = None
