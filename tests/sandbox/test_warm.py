"""Sandboxes started ahead of time for rollouts: fresh per episode, nothing left after the supply closes."""

from __future__ import annotations

import time

import psutil
import pytest

from components.sandbox.protocol import Limits
from components.sandbox.warm import WarmSandboxes, sandbox_supply
from tests.sandbox.conftest import require_backend

pytestmark = pytest.mark.timeout(180)


def _runner_pids() -> set[int]:
    return {p.pid for p in psutil.process_iter(["cmdline"]) if "runner.py" in " ".join(p.info["cmdline"] or [])}


def test_supply_hands_out_fresh_sandboxes_and_cleans_up(backend):
    before = _runner_pids()
    with sandbox_supply(backend, Limits(timeout_s=10), warm=2) as supply:
        first = supply()
        assert first.exec("x = 41\nprint(x + 1)").stdout == "42\n"
        first.close()
        second = supply()
        res = second.exec("print('x' in globals())\nimport os\nprint(os.listdir('.'))")
        assert res.stdout == "False\n[]\n"  # nothing of the previous episode: variables or files
        second.close()
    if backend == "process":
        deadline = time.monotonic() + 5
        while _runner_pids() - before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _runner_pids() - before


def test_a_warm_sandbox_is_ready_before_it_is_asked_for():
    require_backend("process")
    from components.sandbox.process import ProcessSandbox

    starts: list[float] = []

    def factory():
        box = ProcessSandbox(Limits(timeout_s=10))
        starts.append(time.monotonic())
        return box

    with WarmSandboxes(factory, size=2) as supply:
        time.sleep(2.0)  # the episode before: the model is generating
        asked = time.monotonic()
        box = supply()
        waited = time.monotonic() - asked
        assert starts[0] < asked and waited < 0.2, waited
        assert box.exec("print(1)").stdout == "1\n"
        box.close()


def test_stateful_supply_keeps_variables_within_an_episode(backend):
    with sandbox_supply(backend, Limits(timeout_s=10), stateful=True, warm=1) as supply:
        box = supply()
        box.exec("x = 1")
        assert box.exec("print(x + 1)").stdout == "2\n"
        box.close()
