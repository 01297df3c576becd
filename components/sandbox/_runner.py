"""The sandbox runner (zygote): PID 1 of a fresh PID/mount/net/IPC/UTS namespace, started by `ProcessSandbox`.

Runs as root inside the namespaces only long enough to build the filesystem view, then stays root so that user
code (always run under an unprivileged uid) can neither signal nor inspect it. It preloads numpy/pandas once and
forks a worker per exec (stateless) or keeps one worker alive between execs (stateful).

Self-contained on purpose: it is started with `python -I <this file> <config-json>`, so it imports only the
standard library (plus the optional preloads) and nothing from the repository.

Protocol with the host: one JSON object per line. The runner prints {"ready": true} once set up, then answers
each {"code", "timeout_s"} request on stdin with one result object on stdout.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time
import traceback

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 0x1, 0x2
SYS_MOUNT_SETATTR = 442  # same number on x86_64 and arm64 (new syscalls share one table)
PR_SET_NO_NEW_PRIVS = 38
OOM_MARKERS = ("MemoryError", "std::bad_alloc", "Cannot allocate memory")

_libc = ctypes.CDLL(None, use_errno=True)


def _log(msg: str) -> None:
    sys.stderr.write(f"[runner] {msg}\n")
    sys.stderr.flush()


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    if _libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {src} -> {target}: {os.strerror(err)}")


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _make_root_readonly() -> bool:
    """Every existing mount becomes read-only and nosuid (in this namespace only); new mounts stay writable."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, 0, 0)
    rc = _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr))
    if rc != 0:
        _log(f"mount_setattr failed ({os.strerror(ctypes.get_errno())}); relying on the uid drop alone")
        return False
    return True


def _bind_from_fd(fd: int, target: str, writable: bool) -> None:
    os.makedirs(target, exist_ok=True)
    _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
    if writable:  # a bind of a read-only mount is read-only until remounted
        _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)


def _hidden_ancestor(path: str) -> str | None:
    """The topmost ancestor of `path` that others cannot traverse (e.g. /root holding a pyenv), if any."""
    parts = os.path.abspath(path).split("/")[1:]
    for i in range(1, len(parts) + 1):
        anc = "/" + "/".join(parts[:i])
        if not os.stat(anc).st_mode & 0o001:
            return anc
    return None


def _setup_filesystem(cfg: dict) -> None:
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    workdir, tmp_size = cfg["workdir"], f"size={cfg['tmp_mb']}m"
    work_fd = os.open(workdir, os.O_PATH | os.O_DIRECTORY)
    # Interpreter trees under a private directory (pyenv in /root) must stay readable for the dropped uid, while
    # the rest of that directory is hidden behind an empty tmpfs.
    private = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
    expose: dict[str, list[tuple[str, int]]] = {}
    # an interpreter (a venv) that lives under a directory replaced by a private tmpfs is bound back into it
    under_private: list[tuple[str, int]] = []
    for p in sorted(set(cfg["expose"])):
        if not os.path.exists(p):
            continue
        anc = _hidden_ancestor(p)
        if anc:
            expose.setdefault(anc, []).append((p, os.open(p, os.O_PATH | os.O_DIRECTORY)))
        elif any(p == d or p.startswith(d + "/") for d in private):
            under_private.append((p, os.open(p, os.O_PATH | os.O_DIRECTORY)))
    _make_root_readonly()
    for d in private:
        if os.path.isdir(d):
            _mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,{tmp_size}")
    for p, fd in under_private:
        _bind_from_fd(fd, p, writable=False)
        os.close(fd)
    for anc, items in expose.items():
        _mount("tmpfs", anc, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
        for p, fd in items:
            _bind_from_fd(fd, p, writable=False)
            os.close(fd)
    # The working dir keeps its host path (so uploads and code agree on it) even when it lives under /tmp.
    _bind_from_fd(work_fd, workdir, writable=True)
    os.close(work_fd)


def _loopback_up() -> None:
    """A new net namespace has only `lo`, down; bring it up so code can use localhost within the sandbox."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    import fcntl

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, siocgifflags, ifr))[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sh", b"lo", flags | iff_up))


def _vm_size_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


class Runner:
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.uid, self.gid = cfg["uid"], cfg["gid"]
        self.kernel: dict | None = None  # stateful worker: pid, pidfd, fds
        self.kernel_lost: str | None = None
        self.exits: dict[int, int] = {}  # reaped pid -> wait status
        self.as_limit = 0

    # ---------------------------------------------------------------- workers
    def _spawn_worker(self, persistent: bool) -> dict:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # worker
            try:
                os.setsid()
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                os.dup2(out_w, 1)
                os.dup2(err_w, 2)
                keep = {req_r, rep_w}
                for fd in (devnull, out_r, out_w, err_r, err_w, req_w, rep_r):
                    if fd not in keep and fd > 2:
                        os.close(fd)
                _close_fds_except(keep)
                self._drop_privileges()
                _worker_main(req_r, rep_w, persistent, self.cfg["workdir"])
            except BaseException:  # noqa: BLE001 - a worker must never return into the runner's loop
                try:
                    traceback.print_exc()
                finally:
                    os._exit(70)
            os._exit(0)
        for fd in (out_w, err_w, req_r, rep_w):
            os.close(fd)
        for fd in (out_r, err_r, rep_r):
            os.set_blocking(fd, False)
        return {"pid": pid, "pidfd": os.pidfd_open(pid), "out": out_r, "err": err_r, "req": req_w, "rep": rep_r}

    def _drop_privileges(self) -> None:
        lim = self.cfg["limits"]
        mb = 1024 * 1024
        resource.setrlimit(resource.RLIMIT_NPROC, (lim["max_processes"], lim["max_processes"]))
        resource.setrlimit(resource.RLIMIT_NOFILE, (lim["max_open_files"], lim["max_open_files"]))
        resource.setrlimit(resource.RLIMIT_FSIZE, (lim["max_file_mb"] * mb, lim["max_file_mb"] * mb))
        resource.setrlimit(resource.RLIMIT_AS, (self.as_limit, self.as_limit))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.setgroups([])
        os.setresgid(self.gid, self.gid, self.gid)
        os.setresuid(self.uid, self.uid, self.uid)
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        os.chdir(self.cfg["workdir"])

    # ---------------------------------------------------------------- process bookkeeping
    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.exits[pid] = status

    def _uid_pids(self) -> list[int]:
        pids = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/status") as f:
                    text = f.read()
            except OSError:
                continue
            state = uid = None
            for line in text.splitlines():
                if line.startswith("State:"):
                    state = line.split()[1]
                elif line.startswith("Uid:"):
                    uid = int(line.split()[1])
                    break
            if uid == self.uid and state != "Z":
                pids.append(int(name))
        return pids

    def _kill_all(self, spare: int | None = None) -> None:
        """SIGKILL every process of the sandbox uid (setsid-detached ones included) until none is left."""
        for _ in range(1000):
            pids = [p for p in self._uid_pids() if p != spare]
            if not pids:
                break
            for p in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
            time.sleep(0.001)
            self._reap()
        self._reap()

    def _close_worker(self, w: dict) -> None:
        for key in ("pidfd", "out", "err", "req", "rep"):
            with contextlib.suppress(OSError):
                os.close(w[key])

    # ---------------------------------------------------------------- one exec
    def exec(self, code: str, timeout_s: float) -> dict:
        lim = self.cfg["limits"]
        cap = lim["max_output_bytes"]
        stateful = self.cfg["stateful"]
        notice = ""
        if stateful:
            if self.kernel is None:
                self.kernel = self._spawn_worker(persistent=True)
                if self.kernel_lost:
                    notice = f"[sandbox] the previous interpreter was lost ({self.kernel_lost}); state was reset\n"
                    self.kernel_lost = None
            w = self.kernel
            os.kill(w["pid"], signal.SIGCONT)
        else:
            w = self._spawn_worker(persistent=False)
        start = time.monotonic()
        deadline = start + timeout_s
        bufs = {w["out"]: bytearray(), w["err"]: bytearray()}
        truncated = False
        report = b""
        rep = None
        rep_done = False
        died = False
        timed_out = False
        payload = json.dumps({"code": code, "cpu_s": int(timeout_s) + 2}).encode() + b"\n"
        with contextlib.suppress(OSError):
            _write_all(w["req"], payload)
        poller = select.poll()
        for fd in (w["out"], w["err"], w["rep"], w["pidfd"]):
            poller.register(fd, select.POLLIN)

        def drain(fd: int) -> bool:
            nonlocal truncated
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            buf = bufs[fd]
            room = cap - len(buf)
            if room > 0:
                buf += chunk[:room]
            if len(chunk) > room:
                truncated = True  # keep draining and discarding so the writer never blocks
            return True

        open_fds = {w["out"], w["err"]}
        while not (rep_done or died):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for fd, _ev in poller.poll(min(remaining, 0.05) * 1000):
                if fd in open_fds:
                    if not drain(fd):
                        open_fds.discard(fd)
                        poller.unregister(fd)
                elif fd == w["rep"]:
                    try:
                        chunk = os.read(fd, 4096)
                    except BlockingIOError:
                        chunk = b"x"
                    report += chunk
                    rep = _find_report(report, w["pid"])
                    rep_done = rep is not None
                    if not chunk:
                        poller.unregister(fd)
                elif fd == w["pidfd"]:
                    died = True
            self._reap()  # orphans re-parent to us (PID 1); reaping frees their slot under the process cap
        duration = time.monotonic() - start
        keep_kernel = stateful and rep_done and not timed_out
        self._kill_all(spare=w["pid"] if keep_kernel else None)
        if not keep_kernel:
            with contextlib.suppress(ProcessLookupError):
                os.kill(w["pid"], signal.SIGKILL)
        # Every other writer is dead now; collect what is left in the pipes.
        end = time.monotonic() + 1.0
        for fd in list(open_fds):
            while time.monotonic() < end:
                if not select.select([fd], [], [], 0 if keep_kernel else 0.05)[0]:
                    if keep_kernel:
                        break  # the kernel still holds the pipe open: take only what is there
                    continue
                if not drain(fd):
                    break
        if rep is None:  # the worker may have exited right after reporting, before we read the report
            with contextlib.suppress(OSError):
                report += os.read(w["rep"], 1 << 16)
            rep = _find_report(report, w["pid"])
        status_word = None
        if not keep_kernel:
            try:
                _, status_word = os.waitpid(w["pid"], 0)
            except ChildProcessError:
                status_word = self.exits.pop(w["pid"], None)
            self._reap()
            self.exits.clear()
        stdout = bufs[w["out"]].decode("utf-8", "replace")
        stderr = notice + bufs[w["err"]].decode("utf-8", "replace")
        if timed_out:
            status, exit_code = "timeout", None
        elif rep is not None:
            exit_code = rep["exit"]
            status = "ok" if exit_code == 0 else ("oom" if rep["oom"] or _looks_oom(stderr) else "error")
        else:
            exit_code, status = _from_wait_status(status_word, stderr)
        if keep_kernel:
            # Frozen between execs: threads the code left behind cannot burn CPU or race the host's uploads.
            os.kill(w["pid"], signal.SIGSTOP)
        if stateful and not keep_kernel:
            self._close_worker(w)
            self.kernel = None
            self.kernel_lost = "timeout" if timed_out else f"it exited with {exit_code}"
        elif not stateful:
            self._close_worker(w)
        return {
            "status": status,
            "exit_code": exit_code,
            "stdout": stdout,
            "stderr": stderr,
            "truncated": truncated,
            "duration_s": round(duration, 6),
        }


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _find_report(raw: bytes, pid: int) -> dict | None:
    """The worker's own report line; lines from its forked children (or forged ones) carry another pid."""
    for line in raw.split(b"\n")[:-1]:
        try:
            rep = json.loads(line)
            if int(rep["pid"]) == pid:
                return {"exit": int(rep["exit"]), "oom": bool(rep.get("oom"))}
        except (ValueError, KeyError, TypeError):
            continue
    return None


def _looks_oom(stderr: str) -> bool:
    return any(m in stderr for m in OOM_MARKERS)


def _from_wait_status(status_word: int | None, stderr: str) -> tuple[int | None, str]:
    if status_word is None:
        return None, "error"
    if os.WIFSIGNALED(status_word):
        sig = os.WTERMSIG(status_word)
        if sig == signal.SIGXCPU:
            return -sig, "timeout"
        return -sig, "oom" if _looks_oom(stderr) else "error"
    code = os.WEXITSTATUS(status_word)
    return code, "ok" if code == 0 else ("oom" if _looks_oom(stderr) else "error")


def _close_fds_except(keep: set[int]) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


# -------------------------------------------------------------------- the worker side (unprivileged)
def _fresh_stdio() -> None:
    import io

    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    # line-buffered so that what code printed before a timeout kill reaches the caller
    sys.stdout = io.TextIOWrapper(
        io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True
    )
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True
    )
    sys.__stdout__, sys.__stderr__, sys.__stdin__ = sys.stdout, sys.stderr, sys.stdin


def _run_code(code: str, namespace: dict) -> tuple[int, bool]:
    """Run like `python -c`: a traceback on stderr and exit code 1 for an uncaught exception."""
    import linecache

    filename = "<sandbox>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        exec(compile(code, filename, "exec"), namespace)  # noqa: S102 - running untrusted code is the point
        return 0, False
    except SystemExit as e:
        if e.code is None:
            return 0, False
        if isinstance(e.code, int):
            return e.code & 0xFF, False
        print(e.code, file=sys.stderr)
        return 1, False
    except MemoryError:
        _print_exc()
        return 1, True
    except BaseException:  # noqa: BLE001
        _print_exc()
        return 1, False
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # user code may have closed or replaced the stream
                stream.flush()


def _print_exc() -> None:
    etype, value, tb = sys.exc_info()
    # Drop our own frame so the traceback reads as if the code ran under `python -c`.
    tb = tb.tb_next if tb is not None and tb.tb_next is not None else tb
    try:
        traceback.print_exception(etype, value, tb)
    except MemoryError:
        os.write(2, f"{etype.__name__}: {value}\n".encode())


def _worker_main(req_fd: int, rep_fd: int, persistent: bool, workdir: str) -> None:
    import builtins

    _fresh_stdio()
    sys.argv = ["<sandbox>"]
    sys.path[:0] = [""]  # like `python -c`: the cwd (working dir) is importable
    me = os.getpid()
    reader = os.fdopen(req_fd, "rb", buffering=0)
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    line = bytearray()
    while True:
        while not line.endswith(b"\n"):
            chunk = reader.read(1 << 16)
            if not chunk:
                os._exit(0)
            line += chunk
        req = json.loads(line)
        line = bytearray()
        soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        used = resource.getrusage(resource.RUSAGE_SELF)
        used_s = int(used.ru_utime + used.ru_stime)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_CPU, (used_s + req["cpu_s"], hard))
        exit_code, oom = _run_code(req["code"], namespace)
        if os.getpid() != me:  # a child the code forked fell through to here: it must not act as the worker
            os._exit(exit_code)
        with contextlib.suppress(OSError):
            os.write(rep_fd, json.dumps({"pid": me, "exit": exit_code, "oom": oom}).encode() + b"\n")
        if not persistent:
            os._exit(exit_code)


# -------------------------------------------------------------------- entry point
def main() -> None:
    cfg = json.loads(sys.argv[1])
    _setup_filesystem(cfg)
    try:
        _loopback_up()
    except OSError as e:
        _log(f"could not bring lo up: {e}")
    for mod in cfg.get("preload", []):
        try:
            __import__(mod)
        except Exception as e:  # noqa: BLE001 - a missing optional preload only costs speed
            _log(f"preload {mod} failed: {e}")
    runner = Runner(cfg)
    # Address space is capped at what the preloaded runtime maps plus the memory budget.
    runner.as_limit = _vm_size_bytes() + cfg["limits"]["memory_mb"] * 1024 * 1024
    gc.collect()
    gc.freeze()  # keep preloaded objects out of the forked children's GC passes (less copy-on-write)
    out = sys.stdout
    out.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        try:
            res = runner.exec(req["code"], float(req["timeout_s"]))
        except Exception as e:  # noqa: BLE001 - report a runner bug as an error result, keep serving
            runner._kill_all()
            res = {
                "status": "error",
                "exit_code": None,
                "stdout": "",
                "truncated": False,
                "duration_s": 0.0,
                "stderr": f"[sandbox] runner failure: {e!r}\n{traceback.format_exc()}",
            }
        out.write(json.dumps(res) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
