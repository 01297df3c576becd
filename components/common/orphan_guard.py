"""A server that outlives the process that started it holds its memory and cores until someone finds it: a pipeline
killed with SIGKILL (the OOM killer, `kill -9`, a CI timeout) runs no exit hook, and its vLLM server, started in a
session of its own so that stopping it stops its workers too, would go on serving no one.

`guarded(argv)` runs `argv` under this guard: a small stdlib-only process, the leader of the new session, that starts
`argv` as its child, passes on the signals it is sent, and polls its own parent. When the parent is gone (the guard
was handed to a subreaper or to init), it stops its whole process group, SIGTERM and then SIGKILL after a grace
period, and exits. It exits with the child's status otherwise, so that the caller sees the server's own exit.

Not PR_SET_PDEATHSIG: that fires when the *thread* that forked exits, and engines are started from pool threads that
end as soon as the servers answer.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

POLL_S = 0.5
GRACE_S = 15.0


def guarded(argv: list[str], parent: int | None = None) -> list[str]:
    """`argv` run under the guard, which watches `parent` (this process by default)."""
    return [sys.executable, "-I", str(Path(__file__).resolve()), str(parent or os.getpid()), "--", *argv]


def _stop_group(child: subprocess.Popen[bytes]) -> int:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's signal reaches the guard too: outlive it
    os.killpg(0, signal.SIGTERM)
    try:
        return child.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(0, signal.SIGKILL)  # the guard with it
        raise


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        raise SystemExit("usage: orphan_guard.py PARENT_PID -- COMMAND...")
    parent = int(argv[0])
    child = subprocess.Popen(argv[2:])

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    while True:
        try:
            code = child.wait(timeout=POLL_S)
            break
        except subprocess.TimeoutExpired:
            pass
        if os.getppid() != parent:
            code = _stop_group(child)
            break
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
