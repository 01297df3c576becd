"""The sandbox supply rollouts draw from: fresh per episode, nothing left after the supply closes."""

from __future__ import annotations

import time

import psutil
import pytest

from components.sandbox.protocol import Limits
from components.sandbox.warm import sandbox_supply

pytestmark = pytest.mark.timeout(180)


def _runner_pids() -> set[int]:
    """Sandbox processes: every runner.py process but a zygote (which stays for the process's next sandbox; its
    sandboxes are its children and carry its command line)."""
    runners = {p.pid: p.info["ppid"] for p in psutil.process_iter(["cmdline", "ppid"])
               if "runner.py" in " ".join(p.info["cmdline"] or [])}
    return {pid for pid, parent in runners.items() if parent in runners or "zygote" not in _cmd(pid)}


def _cmd(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return ""


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


def test_stateful_supply_keeps_variables_within_an_episode(backend):
    with sandbox_supply(backend, Limits(timeout_s=10), stateful=True, warm=1) as supply:
        box = supply()
        box.exec("x = 1")
        assert box.exec("print(x + 1)").stdout == "2\n"
        box.close()
