"""MedGym's coding environment as an OpenEnv `Environment`: one per session, each with its own CodingEnv and sandbox.

OpenEnv's server sends a client the text of any exception `reset` or `step` raises, and the observation's fields
(its `metadata` stays here); so both go through `EpisodeSession`, whose refusals are fixed text, and the
observation is built from its `Reply`. Arguments a client sends to `reset` are checked here: only `seed`,
`episode_id` and `task_id` reach it (OpenEnv drops the others by this signature).
"""

from __future__ import annotations

import uuid

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from components.adapters.openenv_models import MedGymAction, MedGymObservation, MedGymState
from components.adapters.served import ServedTasks, TaskBook
from components.adapters.session import ClientError, EpisodeSession, Reply, env_action


class MedGymEnvironment(Environment[MedGymAction, MedGymObservation, MedGymState]):
    # sessions share only the read-only TaskBook; each has its own episode and sandbox
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, book: TaskBook, settings: ServedTasks) -> None:
        super().__init__()
        self._session = EpisodeSession(book, settings)
        self._state = MedGymState()

    def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None
              ) -> MedGymObservation:
        """Start a task: `task_id`, or the one `seed` names (modulo the count), or the next in turn."""
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise ClientError("seed must be a non-negative integer")
        if task_id is not None and not isinstance(task_id, str):
            raise ClientError("task_id must be a string")
        if episode_id is not None and (not isinstance(episode_id, str) or len(episode_id) > 255):
            raise ClientError("episode_id must be a string of at most 255 characters")
        reply = self._session.start(task_id=task_id, seed=seed)
        self._state = MedGymState(episode_id=episode_id or uuid.uuid4().hex, step_count=0,
                                  task_id=self._session.episode.task_id)
        return self._observation(reply)

    def step(self, action: MedGymAction, timeout_s: float | None = None) -> MedGymObservation:
        """Take one action; the per-run time limit is the server's (`timeout_s` from a client is not honoured)."""
        reply = self._session.act(env_action(action.type, **action.fields()))
        self._state.step_count += 1
        return self._observation(reply)

    @property
    def state(self) -> MedGymState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="medgym-coding", version="1",
            description="MedAgentGym-style biomedical coding tasks: run code on the task's data in a sandbox, "
                        "submit one answer, rewarded 1.0 when the checker accepts it.")

    def close(self) -> None:
        self._session.close()

    def _observation(self, reply: Reply) -> MedGymObservation:
        return MedGymObservation(text=reply.text, task_id=self._state.task_id, turn=reply.turn,
                                 turns_left=reply.turns_left, files=reply.files, done=reply.done, reward=reply.reward)
