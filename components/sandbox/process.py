"""`process` sandbox backend: each sandbox forked by a warm zygote into fresh namespaces, a cgroup, an empty root.

A sandbox is a fork of this process's zygote (components/sandbox/zygote.py; the code is runner.py's): its own
PID, mount, network, IPC and UTS namespaces; the shared read-only root the zygote built (the task runtime at
/opt/medgym/env, the interpreter at /opt/medgym/python, no path of the host's checkout or interpreter, nothing of the
host's file system besides the system libraries); a private /work, /tmp and /dev/shm, each a tmpfs capped in bytes
and inodes; its own /etc, devpts and /proc; only a loopback interface. One cgroup per sandbox caps its memory, tmpfs
included, and its processes. Agent code runs under a uid of its own (one per live sandbox, locked on the host) with
no groups, rlimits and a seccomp filter; rootless (no root, unprivileged user namespaces), it runs as the user
namespace's root with every capability dropped. Uploads go through the runner, which writes under /work without
following links.

Speed: starting a sandbox costs the zygote a fork (the task libraries are already imported); an exec forks a fresh
child of the sandbox's runner (stateless) or hands code to one session process (stateful).

Needs root, or unprivileged user namespaces and a cgroup subtree delegated to the user (memory and pids); where
either is missing it refuses at start, saying which.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from components.sandbox.channel import (
    UPLOAD_TIMEOUT_S,
    WORKDIR,
    ChannelClosed,
    ChannelError,
    ChannelTimeout,
    FrameBuffer,
    check_put_reply,
    dir_uploads,
    encode_request,
    exec_header,
    exec_result,
    max_exec_reply,
    put_header,
)
from components.sandbox.protocol import PIDS_OVERHEAD, RUNNER_OVERHEAD_MB, ExecResult, Limits
from components.sandbox.zygote import ZygoteError, shared_zygote

UID_BASE, UID_COUNT = 3_000_000, 4096  # far above login uids and the usual /etc/subuid ranges
STARTUP_TIMEOUT_S = 60.0
BACKSTOP_GRACE_S = 15.0  # the runner enforces the deadline; the host only steps in if the runner itself hangs
EXIT_WAIT_S = 5.0  # killing a sandbox's first process ends its PID namespace; the kernel reaps the rest first


class SandboxError(RuntimeError):
    """The sandbox could not be started or used (not a failure of the code run inside it)."""


class _UidLease:
    """A uid/gid reserved for one live sandbox (a flock, so concurrent processes on the host never share one)."""

    def __init__(self) -> None:
        lock_dir = Path(tempfile.gettempdir()) / "medgym-sandbox-uids"
        lock_dir.mkdir(mode=0o700, exist_ok=True)
        start = os.getpid() % UID_COUNT  # start at a different spot per process to avoid contention
        for i in range(UID_COUNT):
            uid = UID_BASE + (start + i) % UID_COUNT
            fd = os.open(lock_dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.uid, self._fd = uid, fd
            return
        raise SandboxError(f"all {UID_COUNT} sandbox uids are in use")

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def spawn_request(uid: int | None, limits: Limits) -> dict:
    """What the zygote needs to start one sandbox: who runs the code and every limit it applies."""
    return {
        "uid": uid,
        "limits": limits.model_dump(),
        "memory_bytes": (limits.memory_mb + RUNNER_OVERHEAD_MB) * 1024 * 1024,
        "pids": limits.max_processes + PIDS_OVERHEAD,
        "disk": {"work_mb": limits.disk_mb, "tmp_mb": limits.disk_mb, "shm_mb": 64, "inodes": limits.max_files},
    }


def process_unavailable() -> str | None:
    """Why the process backend cannot run here (no root and no user namespaces, no cgroup to cap a sandbox
    with), or None when it can: it starts this process's zygote, which every sandbox needs anyway."""
    try:
        shared_zygote()
    except ZygoteError as exc:
        return str(exc)
    return None


class ProcessSandbox:
    """Runs Python code in an empty root in fresh namespaces, as an unprivileged uid; see the module docstring."""

    def __init__(self, limits: Limits = Limits(), stateful: bool = False) -> None:  # noqa: B008 - immutable use
        self.limits = limits
        self.stateful = stateful
        self.workdir = WORKDIR  # as the code sees it
        self._closed = False
        self._pid: int | None = None  # the sandbox's first process (PID 1 in its namespace), a child of the zygote
        self._pidfd = -1
        self._to_runner = self._from_runner = -1
        self._frames = FrameBuffer()
        self._next_id = 0
        self._lost_state: str | None = None
        self._lease: _UidLease | None = None
        try:
            self._zygote = shared_zygote()
        except ZygoteError as exc:
            raise SandboxError(str(exc)) from exc
        # Rootless, code runs as the user namespace's root with no capabilities: there is one uid to run as.
        self._lease = _UidLease() if os.geteuid() == 0 else None
        self.uid = self._lease.uid if self._lease is not None else None
        try:
            self._start_runner()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ runner lifecycle
    def _start_runner(self) -> None:
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        try:
            self._pid, self._pidfd = self._zygote.spawn((stdin_r, stdout_w), spawn_request(self.uid, self.limits))
        except ZygoteError as exc:
            for fd in (stdin_w, stdout_r):
                os.close(fd)
            raise SandboxError(str(exc)) from exc
        finally:
            os.close(stdin_r)
            os.close(stdout_w)
        self._to_runner, self._from_runner = stdin_w, stdout_r
        os.set_blocking(self._from_runner, False)
        self._frames = FrameBuffer()
        try:
            hello = self._read_message(time.monotonic() + STARTUP_TIMEOUT_S, 64 * 1024)
        except ChannelError:
            hello = {}
        if not hello.get("ready"):
            self._kill_runner()
            raise SandboxError(f"sandbox runner failed to start: {hello.get('error') or 'it did not answer'}; the "
                               f"zygote's log ({self._zygote.log_path}) says more")

    def _read_message(self, deadline: float, max_bytes: int) -> dict:
        fd = self._from_runner
        while True:
            msg = self._frames.message(max_bytes)
            if msg is not None:
                return msg
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise ChannelTimeout("runner did not answer in time")
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                raise ChannelClosed("runner closed the stream")
            self._frames.feed(chunk)

    def _request(self, header: dict, payload: bytes = b"", *, timeout_s: float, max_reply: int) -> dict:
        if not self._runner_alive():
            raise ChannelClosed("the runner is gone")
        self._next_id += 1
        try:
            view = memoryview(encode_request({**header, "id": self._next_id}, payload))
            while view:
                view = view[os.write(self._to_runner, view):]
        except OSError as exc:
            raise ChannelClosed(f"runner channel failed: {exc}") from exc
        reply = self._read_message(time.monotonic() + timeout_s, max_reply)
        if reply.get("id") != self._next_id:
            raise ChannelError(f"answer to request {reply.get('id')} while waiting for {self._next_id}")
        return reply

    def _runner_alive(self) -> bool:
        """A pidfd reads as ready once its process has exited."""
        return self._pidfd >= 0 and not select.select([self._pidfd], [], [], 0)[0]

    def _kill_runner(self) -> None:
        pidfd, self._pidfd = self._pidfd, -1
        for fd in (self._to_runner, self._from_runner):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._to_runner = self._from_runner = -1
        if pidfd < 0:
            return
        try:
            with contextlib.suppress(ProcessLookupError):  # PID 1 gone: the kernel ends the whole PID namespace
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            exited = bool(select.select([pidfd], [], [], EXIT_WAIT_S)[0])
        finally:
            os.close(pidfd)
        if not exited and self.uid is not None:
            _kill_uid(self.uid)  # backstop; the namespace's end normally took everything

    def _ensure_runner(self) -> None:
        """Restart a dead runner (a stateful caller is told at its next exec that its state went with it)."""
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if self._runner_alive():
            return
        if self._pidfd >= 0 and self.stateful and not self._lost_state:
            self._lost_state = "the runner died"
        self._kill_runner()
        self._start_runner()

    # ------------------------------------------------------------------ the protocol
    def exec(self, code: str, timeout_s: float | None = None) -> ExecResult:
        timeout = float(timeout_s if timeout_s is not None else self.limits.timeout_s)
        self._ensure_runner()
        notice = ""
        if self._lost_state and self.stateful:
            notice = f"[sandbox] the previous interpreter was lost ({self._lost_state}); state was reset\n"
        self._lost_state = None
        cap = self.limits.max_output_bytes
        start = time.monotonic()
        try:
            reply = self._request(exec_header(code, timeout, self.stateful, cap),
                                  timeout_s=timeout + BACKSTOP_GRACE_S, max_reply=max_exec_reply(cap))
            return exec_result(reply, notice)
        except ChannelError as exc:
            hung = isinstance(exc, ChannelTimeout)
            self._lost_state = "the runner hung" if hung else "the runner died"
            self._kill_runner()
            return ExecResult(status="timeout" if hung else "error", exit_code=None, stdout="",
                              stderr=f"[sandbox] {self._lost_state}; it was restarted\n",
                              duration_s=time.monotonic() - start)

    def upload_file(self, src: Path, dest: str) -> None:
        self._put(Path(src), dest)

    def upload_dir(self, src: Path, dest: str) -> None:
        for path, to in dir_uploads(src, dest):
            self._put(path, to)

    def _put(self, src: Path, dest: str) -> None:
        header = put_header(dest, src.stat().st_mode)
        self._ensure_runner()
        try:
            reply = self._request(header, src.read_bytes(), timeout_s=UPLOAD_TIMEOUT_S, max_reply=64 * 1024)
        except ChannelError as exc:
            self._kill_runner()
            raise OSError(f"upload of {dest!r} failed: {exc}") from exc
        check_put_reply(reply, dest)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._kill_runner()
        if self._lease is not None:
            self._lease.release()

    def is_alive(self) -> bool:
        try:
            return not self._closed and self._runner_alive()
        except Exception:  # noqa: BLE001 - the protocol promises never to raise
            return False

    def __enter__(self) -> ProcessSandbox:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # best effort at interpreter shutdown
            self.close()


def _kill_uid(uid: int) -> None:
    """Host-side backstop: SIGKILL anything still running under a sandbox uid (the PID namespace normally did)."""
    import psutil

    for _ in range(50):
        left = [
            p
            for p in psutil.process_iter(["uids", "status"])
            if p.info["uids"] and p.info["uids"].real == uid and p.info["status"] != psutil.STATUS_ZOMBIE
        ]
        if not left:
            return
        for p in left:
            with contextlib.suppress(psutil.Error):
                p.kill()
        time.sleep(0.01)


if __name__ == "__main__":  # pragma: no cover - a manual smoke check
    with ProcessSandbox() as sb:
        print(sb.exec(sys.argv[1] if len(sys.argv) > 1 else "print('hello')"))
