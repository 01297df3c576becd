"""EpisodeSession's failure path: an exception inside the environment reaches the client as its type only, since its
message may quote the truth (here it does), and the episode is over."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.adapters.served import TaskBook
from components.adapters.session import ClientError, EpisodeSession, env_action
from components.sandbox.factory import open_sandbox
from components.sandbox.protocol import Limits
from tests.adapters.conftest import FEMALE_MEAN_AGE


class DyingSandbox:
    """A real process sandbox whose runs fail with a message naming the truth (a fault injected, not a stand-in)."""

    def __init__(self) -> None:
        self.inner = open_sandbox("process", Limits(timeout_s=10))

    def exec(self, code: str, timeout_s: float | None = None):
        raise RuntimeError(f"runner lost while the truth was {FEMALE_MEAN_AGE}")

    def upload_file(self, src: Path, dest: str) -> None:
        self.inner.upload_file(src, dest)

    def upload_dir(self, src: Path, dest: str) -> None:
        self.inner.upload_dir(src, dest)

    def close(self) -> None:
        self.inner.close()

    def is_alive(self) -> bool:
        return False


def test_a_failure_inside_the_environment_goes_out_as_its_type_only(settings):
    session = EpisodeSession(TaskBook(settings), settings, sandbox_factory=DyingSandbox)
    session.start("age")
    with pytest.raises(ClientError) as caught:
        session.act(env_action("run_code", code="print(1)"))
    assert str(caught.value) == "the environment failed on this action (RuntimeError); the episode is over"
    with pytest.raises(ClientError, match="episode is over"):
        session.act(env_action("submit_answer", answer=FEMALE_MEAN_AGE))
    assert session.reward == 0.0
    session.close()


def test_a_task_that_cannot_start_says_so_without_the_reason(settings):
    def broken():
        raise OSError(f"cannot open /srv/secret/{FEMALE_MEAN_AGE}")

    session = EpisodeSession(TaskBook(settings), settings, sandbox_factory=broken)
    with pytest.raises(ClientError) as caught:
        session.start("age")
    assert str(caught.value) == "the task could not be started (OSError)"
    with pytest.raises(ClientError, match="reset first"):
        session.act(env_action("run_code", code="print(1)"))
