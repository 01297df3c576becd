"""A server process for a test: started in its own session (so stopping it stops what it started), waited for
until `ready()` answers, its log's tail in every failure, and its process group stopped at the end."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_ok(url: str) -> Callable[[], bool]:
    """Ready when `url` answers 200."""
    def ready() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status == 200
        except OSError:
            return False
    return ready


def listening(port: int) -> Callable[[], bool]:
    """Ready when 127.0.0.1:`port` accepts a connection."""
    def ready() -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
        return False
    return ready


def stop_group(proc: subprocess.Popen, grace_s: float = 60, sig: int = signal.SIGTERM) -> int:
    """`sig` to the process group, SIGKILL after `grace_s`; its exit status."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            return proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait()


def tail(log: Path, chars: int = 3000) -> str:
    return log.read_text(errors="replace")[-chars:]


@contextlib.contextmanager
def running(name: str, cmd: list[str], log: Path, ready: Callable[[], bool], startup_s: float,
            env: dict[str, str] | None = None, poll_s: float = 1.0, grace_s: float = 60) -> Iterator[subprocess.Popen]:
    """`cmd` running, once `ready()`; fails the test with the log's tail when it exits or is not ready in time."""
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + startup_s
        while not ready():
            if proc.poll() is not None:
                pytest.fail(f"{name} exited with {proc.returncode}:\n{tail(log)}")
            if time.monotonic() > deadline:
                pytest.fail(f"{name} not ready after {startup_s} s:\n{tail(log)}")
            time.sleep(poll_s)
        yield proc
    finally:
        stop_group(proc, grace_s)


def outlived_by(pgid: int) -> list[int]:
    """The processes of group `pgid` (an orphan-guarded server's) still alive once the guard has had its poll and
    its grace to stop them after their command was killed; [] when the group is gone."""
    from components.common.orphan_guard import GRACE_S, POLL_S
    from components.policies.vllm_server import group_members

    deadline = time.monotonic() + POLL_S + GRACE_S + 15
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return group_members(pgid)
