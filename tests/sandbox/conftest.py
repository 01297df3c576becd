"""Sandbox fixtures: every test that takes `backend` runs against each backend that can run here.

The docker backend skips (with the reason) when its module is missing or no engine answers, unless
MEDGYM_REQUIRE_DOCKER=1, in which case that is a failure: CI with docker must really run it.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator

import psutil
import pytest

from components.sandbox.protocol import Limits, Sandbox


def backend_unavailable(name: str) -> str | None:
    """Why `name` cannot run on this machine, or None when it can."""
    if name == "process":
        from components.sandbox.process import process_unavailable

        return process_unavailable()
    try:
        from components.sandbox.docker import docker_available
    except ImportError as e:
        return f"components.sandbox.docker is not importable ({e})"
    if not docker_available():
        return "no docker engine answers (docker_available() is False)"
    return None


def require_backend(name: str) -> None:
    reason = backend_unavailable(name)
    if reason is None:
        return
    if name == "docker" and os.environ.get("MEDGYM_REQUIRE_DOCKER") == "1":
        pytest.fail(f"MEDGYM_REQUIRE_DOCKER=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(params=["process", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request: pytest.FixtureRequest) -> str:
    require_backend(request.param)
    return request.param


@pytest.fixture
def token() -> str:
    """A unique marker; hostile code puts it in child argv so the test can find any survivor."""
    return f"medgymtok{uuid.uuid4().hex}"


def survivors(token: str, uid: int | None = None) -> list[psutil.Process]:
    """Live processes that carry `token` in their command line or run under the sandbox uid."""
    found = []
    me = os.getpid()
    for p in psutil.process_iter(["pid", "cmdline", "uids", "status"]):
        if p.info["pid"] == me or p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        cmd = " ".join(p.info["cmdline"] or [])
        if token in cmd or (uid is not None and p.info["uids"] and p.info["uids"].real == uid):
            found.append(p)
    return found


def assert_no_survivors(token: str, uid: int | None = None, wait_s: float = 3.0) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        left = survivors(token, uid)
        if not left:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"processes outlived the run: {[(p.pid, p.info['cmdline']) for p in left]}")
        time.sleep(0.05)


@pytest.fixture
def make_sandbox(backend: str, token: str) -> Iterator[Callable[..., Sandbox]]:
    """Opens sandboxes of the parametrized backend; closes them and checks nothing of theirs survives."""
    from components.sandbox.factory import open_sandbox

    opened: list[Sandbox] = []

    def make(limits: Limits | None = None, stateful: bool = False) -> Sandbox:
        sb = open_sandbox(backend, limits=limits or Limits(timeout_s=10, memory_mb=512), stateful=stateful)
        opened.append(sb)
        return sb

    yield make
    for sb in opened:
        sb.close()
        assert sb.is_alive() is False
        assert_no_survivors(token, getattr(sb, "uid", None))
