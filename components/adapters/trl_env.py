"""MedGym's coding tasks as a TRL environment: `GRPOTrainer(environment_factory=trl_environment_factory(...))`.

TRL (>= 1.0, `grpo_trainer.py`) makes one instance per rollout and reuses it, calls `reset(**row)` with the dataset
row's columns and appends what it returns to the prompt, offers every public method but `reset` and `get_reward` to
the model as a tool (its schema from the type hints and the Google docstring), and scores a finished rollout with
`get_reward()`. So the class below has exactly three public tools, run_code, inspect_data and submit_answer, and
its reward is the checker's verdict on the submission and nothing else: printing the answer earns nothing, and
a rollout that never submits scores 0. A tool's return value and its exception text are both shown to the model;
they come from `EpisodeSession`, which never puts task data in either. The rows `trl_dataset` writes hold a task id
and a prompt, never the answer, since TRL hands every column to reward functions and logs.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from components.adapters.served import ServedTasks, TaskBook
from components.adapters.session import EpisodeSession, env_action
from components.envs.episode import Episode

TOOL_SYSTEM_PROMPT = """\
You are a careful biomedical data scientist. You solve each task by running Python in a sandbox that holds the
task's files in its working directory (run_code), looking at a data file's schema and values (inspect_data), and
fixing your code until you are sure of the answer; then you call submit_answer once. Only submit_answer is scored:
printed output never is. Call one tool at a time and read its result before the next."""

EpisodeSink = Callable[[Episode], None]


class MedGymToolEnv:
    """One rollout at a time on MedGym's coding tasks; TRL calls `reset` before each."""

    def __init__(self, book: TaskBook, settings: ServedTasks, episode_sink: EpisodeSink | None = None) -> None:
        self._session = EpisodeSession(book, settings)
        self._sink = episode_sink
        self._reported = True
        # TRL has no close hook and a public `close` would be offered to the model as a tool: free the last
        # episode's sandbox when the instance goes (or at exit)
        weakref.finalize(self, self._session.close)

    def reset(self, task_id: str | None = None, **row: Any) -> str:
        """Start a task: the row's `task_id`, or without one the next served task in turn. Other columns are
        ignored (a row's `prompt` is TRL's; an `answer` column, had a dataset one, never reaches the episode)."""
        self._report()
        self._reported = False
        return self._session.start(task_id=task_id).text

    def run_code(self, code: str) -> str:
        """Run Python code in the task's sandbox, whose working directory holds the task's data files.

        Args:
            code: the Python source to run; print() what you want to see

        Returns:
            What the code printed, or the error it raised with an explanation.
        """
        return self._session.act(env_action("run_code", code=code)).text

    def inspect_data(self, path: str, column: str | None = None, value: str | None = None) -> str:
        """Show a data file's schema; with a column, its distinct values; with a value too, the closest matches.

        Args:
            path: the file, relative to the working directory, e.g. data/patients.csv
            column: a column name; for SQLite files "table.column", or a bare name searched in every table
            value: a value to look for among the column's values

        Returns:
            The schema, the column's values or the near matches.
        """
        return self._session.act(env_action("inspect_data", path=path, column=column, value=value)).text

    def submit_answer(self, answer: str) -> str:
        """Submit the final answer; it is checked once and the episode ends. Only this is scored.

        Args:
            answer: the answer as text: a number, a JSON list, a string; for a coding task the whole program

        Returns:
            Whether the answer was correct.
        """
        return self._session.act(env_action("submit_answer", answer=answer)).text

    def get_reward(self) -> float:
        """The checker's verdict: 1.0 when the submitted answer was checked correct, else 0.0."""
        self._report()
        return self._session.reward

    def _report(self) -> None:
        """Hand the finished rollout's episode to the sink once (get_reward, or the next reset if TRL skipped it)."""
        if self._reported or self._sink is None or self._session.episode is None:
            return
        self._reported = True
        self._sink(self._session.episode)


def trl_environment_factory(settings: ServedTasks, episode_sink: EpisodeSink | None = None
                            ) -> Callable[[], MedGymToolEnv]:
    """The `environment_factory` for GRPOTrainer: the task file is read once, each instance gets its own sandbox.

    `episode_sink` receives each rollout's full Episode record (grader side), e.g. to keep them in an EpisodeStore.
    """
    book = TaskBook(settings)
    return lambda: MedGymToolEnv(book, settings, episode_sink)


def trl_dataset(settings: ServedTasks, repeat: int = 1):
    """A `datasets.Dataset` of conversational prompts, one row per served task (`repeat` times): the system
    message and an empty user turn that `reset` fills with the task, and the `task_id` column `reset` reads."""
    from datasets import Dataset

    ids = TaskBook(settings).ids * repeat
    prompt = [{"role": "system", "content": TOOL_SYSTEM_PROMPT}, {"role": "user", "content": ""}]
    return Dataset.from_dict({"prompt": [prompt] * len(ids), "task_id": ids})
