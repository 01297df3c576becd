"""`process` sandbox backend: an empty root in fresh namespaces, an unprivileged uid, rlimits, a seccomp filter.

Each sandbox is one runner (components/sandbox/runner.py, the same program the docker image runs), started as root
under `unshare --pid --mount --net --ipc --uts --fork --kill-child`. The runner builds the sandbox's whole file
system and pivots into it, so that nothing of the host is visible: the task runtime (runtime.lock, see
runtime.py) and the interpreter read-only, without the project's package or the host's site-packages; a private
/work, /tmp and /dev/shm, each a tmpfs capped in bytes and inodes (nothing is written to the host's disk); its own
/dev with its own devpts, its own /proc; only a loopback interface. Agent code runs under a uid of its own (one per
live sandbox, locked on the host) with no groups, rlimits (address space, processes, files, CPU) and a seccomp
filter. Uploads go through the runner, which writes under /work without following links.

Speed: the runner imports numpy/pandas once and forks a fresh child per exec (stateless) or keeps one session
process between execs (stateful), so an exec costs a fork instead of an interpreter start.

Requires root (namespaces, uid switch) and util-linux `unshare`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
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
from components.sandbox.protocol import ExecResult, Limits
from components.sandbox.runtime import Runtime, ensure_runtime, host_site_dirs

RUNNER = Path(__file__).with_name("runner.py")
RUNTIME_IN_ROOT = "/opt/medgym/env"
UID_BASE, UID_COUNT = 3_000_000, 4096  # far above login uids and the usual /etc/subuid ranges
STARTUP_TIMEOUT_S = 60.0
BACKSTOP_GRACE_S = 15.0  # the runner enforces the deadline; the host only steps in if the runner itself hangs


class SandboxError(RuntimeError):
    """The sandbox could not be started or used (not a failure of the code run inside it)."""


def _minimal_env() -> dict[str, str]:
    """Built from scratch, never from os.environ, so no secret of the host process can leak in."""
    return {
        "PATH": f"{RUNTIME_IN_ROOT}/bin:/usr/local/bin:/usr/bin:/bin",
        "HOME": WORKDIR,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONIOENCODING": "utf-8",
        "MPLBACKEND": "Agg",
        # One BLAS/OpenMP thread: keeps the address-space baseline small and stops a task grabbing every core.
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


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


def runner_config(rt: Runtime, uid: int, root: Path, limits: Limits) -> dict:
    """What the runner needs to build the sandbox's root and run code as `uid`."""
    binds = [{"src": str(rt.env), "dst": RUNTIME_IN_ROOT}]
    if rt.base_prefix != Path("/usr") and Path("/usr") not in rt.base_prefix.parents:  # /usr is bound whole
        binds.append({"src": str(rt.base_prefix), "dst": str(rt.base_prefix)})
    return {
        "root": str(root),
        "uid": uid,
        "runner": str(RUNNER),
        "python": f"{RUNTIME_IN_ROOT}/bin/python",
        "binds": binds,
        "masks": host_site_dirs(rt),
        "env": _minimal_env(),
        "limits": limits.model_dump(),
        "disk": {"work_mb": limits.disk_mb, "tmp_mb": limits.disk_mb, "shm_mb": 64, "inodes": limits.max_files},
    }


class ProcessSandbox:
    """Runs Python code in an empty root in fresh namespaces, as an unprivileged uid; see the module docstring."""

    def __init__(self, limits: Limits = Limits(), stateful: bool = False) -> None:  # noqa: B008 - immutable use
        if os.geteuid() != 0:
            raise SandboxError("the process sandbox needs root (namespaces and a uid switch); use docker instead")
        if shutil.which("unshare") is None:
            raise SandboxError("the process sandbox needs util-linux `unshare` on PATH")
        self.limits = limits
        self.stateful = stateful
        self.workdir = WORKDIR  # as the code sees it
        self._closed = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._frames = FrameBuffer()
        self._next_id = 0
        self._lost_state: str | None = None
        self._runtime = ensure_runtime()
        self._lease = _UidLease()
        self.uid = self._lease.uid
        try:
            _remove_stale_dirs(self.uid)
            # Only a mount point for the sandbox's root (mounted in its own namespace) and the runner's log.
            self._base = Path(tempfile.mkdtemp(prefix=f"medgym-sbx-{self.uid}-"))
            (self._base / "root").mkdir()
            self._start_runner()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ runner lifecycle
    def _start_runner(self) -> None:
        cfg = runner_config(self._runtime, self.uid, self._base / "root", self.limits)
        log = open(self._base / "runner.log", "ab")  # noqa: SIM115 - handed to the child, closed right after
        base_python = str(self._runtime.base_prefix / "bin" / f"python{self._runtime.python_version}")
        try:
            self._proc = subprocess.Popen(
                ["unshare", "--pid", "--mount", "--net", "--ipc", "--uts", "--fork", "--kill-child",
                 base_python, "-I", "-S", str(RUNNER), "process", json.dumps(cfg)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=_minimal_env(),
                cwd="/",
                start_new_session=True,
                close_fds=True,
            )
        finally:
            log.close()
        assert self._proc.stdout is not None
        os.set_blocking(self._proc.stdout.fileno(), False)
        self._frames = FrameBuffer()
        try:
            hello = self._read_message(time.monotonic() + STARTUP_TIMEOUT_S, 1024)
        except ChannelError:
            hello = {}
        if not hello.get("ready"):
            tail = (self._base / "runner.log").read_text(errors="replace")[-2000:]
            self._kill_runner()
            raise SandboxError(f"sandbox runner failed to start; its log ends with:\n{tail}")

    def _read_message(self, deadline: float, max_bytes: int) -> dict:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
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
        if self._proc is None or self._proc.poll() is not None:
            raise ChannelClosed("the runner is gone")
        assert self._proc.stdin is not None
        self._next_id += 1
        try:
            self._proc.stdin.write(encode_request({**header, "id": self._next_id}, payload))
            self._proc.stdin.flush()
        except OSError as exc:
            raise ChannelClosed(f"runner channel failed: {exc}") from exc
        reply = self._read_message(time.monotonic() + timeout_s, max_reply)
        if reply.get("id") != self._next_id:
            raise ChannelError(f"answer to request {reply.get('id')} while waiting for {self._next_id}")
        return reply

    def _kill_runner(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):  # --kill-child and PID-ns teardown take the rest
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        _kill_uid(self.uid)

    def _ensure_runner(self) -> None:
        """Restart a dead runner (a stateful caller is told at its next exec that its state went with it)."""
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if self._proc is not None and self._proc.poll() is None:
            return
        if self._proc is not None and self.stateful and not self._lost_state:
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
        if getattr(self, "_base", None) is not None:
            shutil.rmtree(self._base, ignore_errors=True)
        self._lease.release()

    def is_alive(self) -> bool:
        try:
            return not self._closed and self._proc is not None and self._proc.poll() is None
        except Exception:  # noqa: BLE001 - the protocol promises never to raise
            return False

    def __enter__(self) -> ProcessSandbox:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # best effort at interpreter shutdown
            self.close()


def _remove_stale_dirs(uid: int) -> None:
    """Dirs named for `uid` whose owner died without close(): holding the uid's lock proves none is in use."""
    for stale in Path(tempfile.gettempdir()).glob(f"medgym-sbx-{uid}-*"):
        shutil.rmtree(stale, ignore_errors=True)


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
