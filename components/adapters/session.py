"""One client's episodes on CodingEnv, with everything the client may read checked on the way out.

The adapters (TRL tools, the OpenEnv server) translate their protocol into `start` and `act` and show the client a
`Reply` or a `ClientError`, nothing else. What a reply holds is read from the episode record as the agent sees it
(the turn's observation; the reward once the checker has ruled); the task record, the checker's reason and the
sandbox stay here. A client error says what the client did wrong in fixed words; any other failure (a sandbox that
died, a checker that raised) is logged here with its traceback and reaches the client as its exception type only,
since a message raised deep in a checker may quote the truth.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from pydantic import BaseModel, ValidationError

from components.adapters.served import ServedTasks, TaskBook, UnknownTask
from components.envs.actions import InspectData, RunCode, SubmitAnswer
from components.envs.coding_env import CodingEnv, make_sandbox_factory
from components.envs.episode import Episode
from components.sandbox.protocol import Sandbox

log = logging.getLogger(__name__)

EnvAction = RunCode | InspectData | SubmitAnswer


class ClientError(Exception):
    """A refusal the client reads: fixed text, or the client's own input clipped; never task data."""


class Reply(BaseModel):
    text: str  # what the agent is shown
    turn: int  # actions taken so far
    turns_left: int
    files: list[str]  # the task's data files in the sandbox's working directory
    done: bool
    reward: float  # the checker's verdict once done (1.0 correct, else 0.0); 0.0 before


class EpisodeSession:
    """Episodes one after another for one client; `start` ends the one before (and frees its sandbox)."""

    def __init__(self, book: TaskBook, settings: ServedTasks,
                 sandbox_factory: Callable[[], Sandbox] | None = None) -> None:
        self._book = book
        self._settings = settings
        factory = sandbox_factory or make_sandbox_factory(settings.env, backend=settings.backend)
        self._env = CodingEnv(book.root, factory, settings.env)
        self._episode: Episode | None = None
        self._failed = False
        self._started = 0

    @property
    def episode(self) -> Episode | None:
        """The current episode's full record (grader side: it holds the checker's reason)."""
        return self._episode

    @property
    def reward(self) -> float:
        """The checker's verdict on the current episode: 1.0 for an accepted submission, else 0.0 (also while it runs)."""
        ep = self._episode
        return ep.reward if ep is not None and ep.done else 0.0

    def start(self, task_id: str | None = None, seed: int | None = None) -> Reply:
        try:
            task = self._book.get(task_id) if task_id is not None else self._book.pick(seed)
        except UnknownTask as exc:
            raise ClientError(str(exc)) from None
        self._episode, self._failed = None, False
        try:
            self._env.reset(task, sample_index=self._started)
        except Exception as exc:  # noqa: BLE001 - the reason may name server paths: logged here, the type goes out
            log.exception("starting task %s failed", task.task_id)
            self._env.close()
            raise ClientError(f"the task could not be started ({type(exc).__name__})") from None
        self._started += 1
        self._episode = self._env.episode
        return self._reply(self._episode.first_observation)

    def act(self, action: EnvAction) -> Reply:
        ep = self._episode
        if ep is None:
            raise ClientError("no episode is running: reset first")
        if ep.done or self._failed:
            raise ClientError("the episode is over: reset to start another")
        self._check_size(action)
        try:
            self._env.step(action)
        except Exception as exc:  # noqa: BLE001 - see the module docstring
            log.exception("episode %s: step failed", ep.episode_id)
            self._failed = True
            self._env.close()
            raise ClientError(f"the environment failed on this action ({type(exc).__name__}); the episode is over") from None
        return self._reply(ep.turns[-1].observation)

    def close(self) -> None:
        self._env.close()

    def _check_size(self, action: EnvAction) -> None:
        limit = self._settings.max_action_chars
        if isinstance(action, SubmitAnswer):
            try:
                size = len(action.answer if isinstance(action.answer, str) else json.dumps(action.answer, default=str))
            except (ValueError, TypeError, RecursionError):  # nested past the interpreter's limits: not an answer
                raise ClientError("the answer could not be read as JSON") from None
        elif isinstance(action, RunCode):
            size = len(action.code)
        else:
            size = sum(len(s or "") for s in (action.path, action.column, action.value))
        if size > limit:
            raise ClientError(f"the action is {size} characters long; at most {limit} are accepted")

    def _reply(self, text: str) -> Reply:
        ep = self._episode
        max_turns = self._settings.env.max_turns
        return Reply(text=text, turn=len(ep.turns), turns_left=max(max_turns - len(ep.turns), 0),
                     files=[cf.path for cf in self._book.get(ep.task_id).context_files],
                     done=ep.done, reward=self.reward)


def env_action(kind: str, **fields: object) -> EnvAction:
    """A typed action from a client's fields; a ClientError naming the field when they do not make one."""
    cls = {"run_code": RunCode, "inspect_data": InspectData, "submit_answer": SubmitAnswer}.get(kind)
    if cls is None:
        raise ClientError(f"unknown action type {str(kind)[:50]!r}: run_code, inspect_data or submit_answer")
    try:
        return cls(**fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "action"
        raise ClientError(f"invalid {kind} action: field {where!r}: {err['msg']}") from None
