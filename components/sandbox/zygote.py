"""The `process` backend's zygote: one warm process per host process that forks every new sandbox.

Starting a sandbox used to start an interpreter (build a root, import numpy and pandas: about 0.3 s of CPU). The
zygote does that once: it builds the read-only root every sandbox shares, pivots into it, imports the task libraries,
and then forks each new sandbox into its own namespaces, cgroup, tmpfs mounts and uid (components/sandbox/runner.py,
`_zygote_serve`). A sandbox costs a fork.

The host talks to the zygote over a socketpair: a spawn request carries the two pipe ends the sandbox will serve on
and a reply socket (SCM_RIGHTS), and its limits; the answer, on that reply socket, carries a pidfd of the
sandbox's first process, so that killing it can never hit a reused pid. The zygote ends, with every sandbox it
started, when the host closes its end.

One zygote per host process, started on first use: a process-wide resource like a connection pool.
A forked host process gets a zygote of its own (it cannot share its parent's socket safely).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

from components.sandbox.runtime import Runtime, ensure_runtime, host_site_dirs

RUNNER = Path(__file__).with_name("runner.py")
STARTUP_TIMEOUT_S = 120.0
SPAWN_TIMEOUT_S = 30.0
MAX_MESSAGE = 1 << 16


class ZygoteError(RuntimeError):
    """The zygote could not be started or could not start a sandbox."""


def sandbox_env() -> dict[str, str]:
    """The environment every sandboxed process gets, built from scratch (never from os.environ: no host secret)."""
    return {
        "PATH": "/opt/medgym/env/bin:/usr/local/bin:/usr/bin:/bin",
        # The interpreter sits at a neutral prefix, not where it was built: its libpython is found from here.
        "LD_LIBRARY_PATH": "/opt/medgym/python/lib",
        "HOME": "/work",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONIOENCODING": "utf-8",
        # Every sandbox is a fork of one interpreter, so they share its string-hash seed anyway: fix it, so that
        # set and dict orders, and any output that follows them, are the same in every sandbox, zygote and backend
        # (an expected output taken in one sandbox is reproduced in any other).
        "PYTHONHASHSEED": "0",
        "MPLBACKEND": "Agg",
        # One BLAS/OpenMP thread: keeps the address-space baseline small and stops a task grabbing every core.
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


class Zygote:
    """A running zygote and the control socket to it; `spawn` is thread-safe."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._lock = threading.Lock()
        self._base = Path(tempfile.mkdtemp(prefix="medgym-zygote-"))
        (self._base / "root").mkdir()
        self.log_path = self._base / "zygote.log"
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        cfg = {
            "ctl_fd": theirs.fileno(),
            "root": str(self._base / "root"),
            "runner": str(RUNNER),
            "base_prefix": str(runtime.base_prefix),
            "python_version": runtime.python_version,
            "site_packages": str(runtime.site_packages),
            "masks": host_site_dirs(runtime),
            "env": sandbox_env(),
        }
        base_python = str(runtime.base_prefix / "bin" / f"python{runtime.python_version}")
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [base_python, "-I", "-S", str(RUNNER), "zygote", json.dumps(cfg)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=sandbox_env() | {"LD_LIBRARY_PATH": ""},
                cwd="/", start_new_session=True, pass_fds=(theirs.fileno(),),
            )
        theirs.close()
        self._sock = ours
        hello = self._receive(STARTUP_TIMEOUT_S)[0]
        if not hello.get("ready"):
            self.close()
            raise ZygoteError(f"the process sandbox's zygote did not start: {hello.get('error') or self._log_tail()}")

    def _receive(self, timeout_s: float, sock: socket.socket | None = None) -> tuple[dict, list[int]]:
        sock = sock or self._sock
        if not select.select([sock], [], [], timeout_s)[0]:
            raise ZygoteError(f"the zygote did not answer within {timeout_s:.0f} s; its log ends with:\n{self._log_tail()}")
        msg, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 1)
        if not msg:
            raise ZygoteError(f"the zygote is gone; its log ends with:\n{self._log_tail()}")
        return json.loads(msg), fds

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def spawn(self, pipes: tuple[int, int], request: dict) -> tuple[int, int]:
        """Start one sandbox serving on `pipes` (its stdin's read end, its stdout's write end): (pid, pidfd).

        The answer comes on a socket of this request's own, so starts asked for by several threads overlap: the
        zygote forks and goes on, and each sandbox answers when its namespaces are entered."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with ours:
            try:
                with theirs, self._lock:
                    socket.send_fds(self._sock, [json.dumps(request).encode()], [*pipes, theirs.fileno()])
                reply, fds = self._receive(SPAWN_TIMEOUT_S, ours)
            except OSError as exc:
                raise ZygoteError(f"the zygote's channel failed: {exc}") from exc
        if not reply.get("ok") or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise ZygoteError(f"the zygote could not start a sandbox: {reply.get('error')}")
        return int(reply["pid"]), fds[0]

    def alive(self) -> bool:
        return self._proc.poll() is None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()  # the zygote kills its sandboxes and exits on EOF
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        with contextlib.suppress(OSError):
            (self._base / "root").rmdir()
            self.log_path.unlink()
            self._base.rmdir()


_zygotes: dict[int, Zygote] = {}
_zygotes_lock = threading.Lock()


def shared_zygote() -> Zygote:
    """This process's zygote, started on first use (and again if it died). The task runtime is looked up (and
    built if missing) only then: a sandbox start reads no file."""
    with _zygotes_lock:
        zygote = _zygotes.get(os.getpid())
        if zygote is None or not zygote.alive():
            zygote = _zygotes[os.getpid()] = Zygote(ensure_runtime())
        return zygote


@atexit.register
def _close_zygotes() -> None:
    """Their temporary folders go with them (the zygotes would end anyway once this process's sockets close)."""
    with _zygotes_lock:
        for pid, zygote in list(_zygotes.items()):
            if pid == os.getpid():
                zygote.close()
        _zygotes.clear()
