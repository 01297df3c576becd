"""`process` sandbox backend: Linux namespaces + an unprivileged uid + rlimits, with a warm forking runner.

Isolation, per sandbox instance:
- `unshare --pid --mount --net --ipc --uts --fork --kill-child`: the runner is PID 1 of its own PID namespace
  (killing it kills every process of the run, setsid-detached ones included), sees only a loopback interface
  (no network), and has its own mount table in which every host mount is read-only and nosuid, /tmp, /var/tmp
  and /dev/shm are fresh tmpfs, and only the working dir is writable.
- User code runs under a uid/gid of its own (one per live sandbox, locked on the host), with no supplementary
  groups and no_new_privs, so it cannot signal or read the root runner, and RLIMIT_NPROC (which root ignores)
  caps the processes of this sandbox only. rlimits: address space (preloaded runtime + memory_mb), file size,
  open files, processes, CPU time as a backstop to the wall-clock deadline.
- The environment is built from scratch; nothing of the host's os.environ reaches the runner.

Speed: the runner imports numpy/pandas once and forks a fresh worker per exec (stateless) or keeps one worker
interpreter between execs (stateful), so an exec costs a fork instead of an interpreter start.

Requires root (namespaces, uid switch) and util-linux `unshare` (present on Debian/Ubuntu base images).
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

from components.sandbox.protocol import ExecResult, Limits

RUNNER = Path(__file__).with_name("_runner.py")
UID_BASE, UID_COUNT = 3_000_000, 4096  # far above login uids and the usual /etc/subuid ranges
PRELOAD = ("numpy", "pandas")
STARTUP_TIMEOUT_S = 60.0
BACKSTOP_GRACE_S = 15.0  # the runner enforces the deadline; the host only steps in if the runner itself hangs


class SandboxError(RuntimeError):
    """The sandbox could not be started or used (not a failure of the code run inside it)."""


def _minimal_env(workdir: str, bindir: str) -> dict[str, str]:
    """Built from scratch, never from os.environ, so no secret of the host process can leak in."""
    return {
        "PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
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


class ProcessSandbox:
    """Runs Python code in a namespaced, unprivileged, rlimited process; see the module docstring."""

    def __init__(self, limits: Limits = Limits(), stateful: bool = False) -> None:  # noqa: B008 - immutable use
        if os.geteuid() != 0:
            raise SandboxError("the process sandbox needs root (namespaces and a uid switch); use docker instead")
        if shutil.which("unshare") is None:
            raise SandboxError("the process sandbox needs util-linux `unshare` on PATH")
        self.limits = limits
        self.stateful = stateful
        self._closed = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = b""
        self._lost_state: str | None = None
        self._lease = _UidLease()
        self.uid = self._lease.uid
        try:
            _remove_stale_dirs(self.uid)
            self._base = Path(tempfile.mkdtemp(prefix=f"medgym-sbx-{self.uid}-"))
            os.chmod(self._base, 0o711)  # the sandbox uid may traverse to its workdir, not list or read the rest
            self.workdir = self._base / "work"
            self.workdir.mkdir(mode=0o700)
            os.chown(self.workdir, self.uid, self.uid)
            self._start_runner()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ runner lifecycle
    def _start_runner(self) -> None:
        bindir = str(Path(sys.executable).parent)
        expose = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(os.path.realpath(sys.executable)).parent)}
        cfg = {
            "uid": self.uid,
            "gid": self.uid,
            "workdir": str(self.workdir),
            "stateful": self.stateful,
            "limits": self.limits.model_dump(),
            "tmp_mb": max(64, self.limits.max_file_mb * 2),
            "expose": sorted(expose),
            "preload": list(PRELOAD),
        }
        log = open(self._base / "runner.log", "ab")  # noqa: SIM115 - handed to the child, closed right after
        try:
            self._proc = subprocess.Popen(
                [
                    "unshare",
                    "--pid",
                    "--mount",
                    "--net",
                    "--ipc",
                    "--uts",
                    "--fork",
                    "--kill-child",
                    "--mount-proc",
                    sys.executable,
                    "-I",
                    str(RUNNER),
                    json.dumps(cfg),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=_minimal_env(str(self.workdir), bindir),
                cwd="/",
                start_new_session=True,
                close_fds=True,
            )
        finally:
            log.close()
        assert self._proc.stdout is not None
        os.set_blocking(self._proc.stdout.fileno(), False)
        self._buf = b""
        hello = self._read_line(time.monotonic() + STARTUP_TIMEOUT_S)
        if hello is None or not json.loads(hello).get("ready"):
            tail = (self._base / "runner.log").read_text(errors="replace")[-2000:]
            self._kill_runner()
            raise SandboxError(f"sandbox runner failed to start; its log ends with:\n{tail}")

    def _read_line(self, deadline: float) -> bytes | None:
        """One line from the runner, or None at EOF or the deadline (never blocks past it)."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

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

    # ------------------------------------------------------------------ the protocol
    def exec(self, code: str, timeout_s: float | None = None) -> ExecResult:
        if self._closed:
            raise SandboxError("exec on a closed sandbox")
        timeout = float(timeout_s if timeout_s is not None else self.limits.timeout_s)
        notice = ""
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None and self.stateful:
                self._lost_state = "the runner died"
            self._kill_runner()
            self._start_runner()
            if self._lost_state:
                notice = f"[sandbox] the previous interpreter was lost ({self._lost_state}); state was reset\n"
                self._lost_state = None
        assert self._proc is not None and self._proc.stdin is not None
        start = time.monotonic()
        try:
            self._proc.stdin.write(json.dumps({"code": code, "timeout_s": timeout}).encode() + b"\n")
            self._proc.stdin.flush()
            line = self._read_line(start + timeout + BACKSTOP_GRACE_S)
        except (BrokenPipeError, OSError):
            line = None
        if line is None:
            hung = self._proc is not None and self._proc.poll() is None
            self._lost_state = "the runner hung" if hung else "the runner died"
            self._kill_runner()
            return ExecResult(
                status="timeout" if hung else "error",
                exit_code=None,
                stdout="",
                stderr=f"[sandbox] {self._lost_state}; it was restarted\n",
                duration_s=time.monotonic() - start,
            )
        res = json.loads(line)
        res["stderr"] = notice + res["stderr"]
        return ExecResult(**res)

    def upload_file(self, src: Path, dest: str) -> None:
        target = self._target(dest)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
        self._chown_tree(target)

    def upload_dir(self, src: Path, dest: str) -> None:
        target = self._target(dest)
        shutil.copytree(src, target, dirs_exist_ok=True)
        self._chown_tree(target)

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

    # ------------------------------------------------------------------ helpers
    def _target(self, dest: str) -> Path:
        """`dest` relative to the working dir; anything that would land outside it is refused."""
        target = (self.workdir / dest).resolve()
        work = self.workdir.resolve()
        if target != work and work not in target.parents:
            raise ValueError(f"upload destination {dest!r} is outside the sandbox working dir")
        parent = target.parent
        parents = []
        while parent != work and work in parent.parents:
            parents.append(parent)
            parent = parent.parent
        for p in reversed(parents):
            if not p.exists():
                p.mkdir()
                os.chown(p, self.uid, self.uid)
        return target

    def _chown_tree(self, path: Path) -> None:
        os.chown(path, self.uid, self.uid, follow_symlinks=False)
        if path.is_dir() and not path.is_symlink():
            for root, dirs, files in os.walk(path):
                for name in dirs + files:
                    os.chown(os.path.join(root, name), self.uid, self.uid, follow_symlinks=False)


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
