"""The warm runner: the main process of every MedGym sandbox container.

It pre-imports the scientific stack once, then serves requests framed on stdin and answers on stdout
(the container's attach stream, held by the owning host process):

    request  = 4-byte big-endian length + JSON header [+ header["size"] raw bytes for "put"]
    response = 4-byte big-endian length + JSON

Stateless `exec` forks a child per request (a fresh namespace with numpy/pandas already imported);
stateful `exec` sends the code to one long-lived forked session process that keeps its globals.
The runner enforces the deadline and the output cap itself; the host only keeps a backstop.

It exits (and the container, started with auto-remove, disappears) when stdin reaches EOF -- which
happens when the owner process dies, because the container is created with StdinOnce -- or when its
lifetime runs out. PID 1 is a fork of this script that only reaps orphans (so zombies never eat into
the pid limit) and exits with the server. Both are non-dumpable, so same-uid user code cannot reach the
protocol stream through /proc/<pid>/fd.

Runs under Debian's python3 with only the standard library plus the preloaded modules.
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import errno
import json
import os
import select
import shutil
import signal
import socket
import struct
import sys
import time
import traceback

WORKDIR = "/work"
SCRATCH_DIRS = ("/work", "/tmp", "/dev/shm")
PRELOAD = ("numpy", "pandas")
CHUNK = 65536
MAX_REQUEST = 1 << 30


def _preload() -> None:
    for name in PRELOAD:
        try:
            __import__(name)
        except Exception:  # a missing module only costs speed; user code reports its own ImportError
            pass


def _set_non_dumpable() -> None:
    # Same-uid user code could otherwise open /proc/1/fd/* and write into the host's protocol stream.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:
        pass


def _oom_kills() -> int:
    """The memory cgroup's OOM-kill counter (v2 memory.events or v1 memory.oom_control)."""
    for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        try:
            with open(path) as fh:
                for line in fh:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except OSError:
            continue
    return 0


class Runner:
    def __init__(self, lifetime_s: float) -> None:
        self.deadline_life = time.monotonic() + lifetime_s
        # Keep the protocol on private fds; 0/1/2 become /dev/null so children inherit nothing useful.
        self.proto_in = os.dup(0)
        self.proto_out = os.dup(1)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)
        self.inbuf = b""
        self.spared = {"1", str(os.getpid())}  # the init process and this server
        self.statuses: dict[int, int] = {}
        self.session_pid: int | None = None
        self.session_sock: socket.socket | None = None
        self.session_lost: str | None = None
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        self.wake_w = wake_w

    # ---- framing -------------------------------------------------------------------------------
    def send(self, obj: dict) -> None:
        data = json.dumps(obj).encode()
        view = memoryview(struct.pack(">I", len(data)) + data)
        while view:
            n = os.write(self.proto_out, view)
            view = view[n:]

    def _fill(self, n: int) -> bool:
        """Read until inbuf holds n bytes; False on EOF or when the lifetime runs out."""
        while len(self.inbuf) < n:
            self.reap()
            left = self.deadline_life - time.monotonic()
            if left <= 0:
                return False
            ready, _, _ = select.select([self.proto_in, self.wake_r], [], [], min(left, 5.0))
            if self.wake_r in ready:
                self._drain_wake()
            if self.proto_in in ready:
                chunk = os.read(self.proto_in, max(CHUNK, n - len(self.inbuf)))
                if not chunk:
                    return False
                self.inbuf += chunk
        return True

    def _take(self, n: int) -> bytes:
        data, self.inbuf = self.inbuf[:n], self.inbuf[n:]
        return data

    def recv(self) -> tuple[dict, bytes] | None:
        if not self._fill(4):
            return None
        (length,) = struct.unpack(">I", self._take(4))
        if not self._fill(length):
            return None
        header = json.loads(self._take(length))
        size = int(header.get("size", 0))
        if size < 0 or size > MAX_REQUEST:
            raise ValueError(f"bad payload size {size}")
        if not self._fill(size):
            return None
        return header, self._take(size)

    # ---- processes -----------------------------------------------------------------------------
    def _drain_wake(self) -> None:
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def reap(self) -> None:
        """Collect every exited child; remember statuses of the ones we started."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.statuses[pid] = status

    def kill_all(self) -> None:
        """SIGKILL every process in the container but this one, until none is left (fork bombs too)."""
        for _ in range(1000):
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.reap()
            if not any(p.isdigit() and p not in self.spared for p in os.listdir("/proc")):
                break
            time.sleep(0.001)
        self.reap()
        if self.session_pid is not None:
            self.statuses.pop(self.session_pid, None)
            self.session_pid = None
        if self.session_sock is not None:
            self.session_sock.close()
            self.session_sock = None
        self.statuses.clear()

    def _child_setup(self, out_w: int, err_w: int, keep: tuple[int, ...] = ()) -> None:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        for fd in range(3, 1024):
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        try:  # make the user's process the OOM killer's first choice, never the runner
            with open("/proc/self/oom_score_adj", "w") as fh:
                fh.write("1000")
        except OSError:
            pass
        os.chdir(WORKDIR)

    # ---- requests ------------------------------------------------------------------------------
    def handle(self, header: dict, payload: bytes) -> dict:
        op = header.get("op")
        if op == "ping":
            return {"ok": True}
        if op == "exec":
            return self.exec(header)
        if op == "put":
            return self.put(header, payload)
        if op == "reset":
            self.kill_all()
            for d in SCRATCH_DIRS:
                _wipe(d)
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def put(self, header: dict, payload: bytes) -> dict:
        dest = os.path.normpath(os.path.join(WORKDIR, header["path"]))
        if not dest.startswith(WORKDIR + "/"):
            return {"ok": False, "error": f"{header['path']!r} is outside {WORKDIR}"}
        try:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, header.get("mode", 0o644) & 0o777)
            try:
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        except OSError as exc:
            return {"ok": False, "error": f"{dest}: {exc.strerror}"}
        return {"ok": True}

    def exec(self, header: dict) -> dict:
        code: str = header["code"]
        timeout = float(header["timeout"])
        cap = int(header["max_output"])
        stateful = bool(header.get("stateful"))
        start = time.monotonic()
        deadline = start + timeout
        oom_before = _oom_kills()
        notice = b""
        if stateful and self.session_pid is None and self.session_lost:
            notice = f"[sandbox] the previous interpreter was lost ({self.session_lost}); state was reset\n".encode()
            self.session_lost = None
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        if stateful:
            pid = self._session_start(out_w, err_w, code)
        else:
            pid = os.fork()
            if pid == 0:
                self._child_setup(out_w, err_w)
                _run_child(code)
        os.close(out_w)
        os.close(err_w)

        bufs = {out_r: bytearray(), err_r: bytearray()}
        open_fds = {out_r, err_r}
        truncated = False
        timed_out = False
        exit_status: int | None = None  # waitpid status (stateless) or reported code (stateful)
        session_died = False
        while True:
            self.reap()
            if not stateful and pid in self.statuses:
                exit_status = self.statuses.pop(pid)
                self.kill_all()  # leftovers of the child; closes the pipes they hold
            if stateful and exit_status is None and self.session_pid in self.statuses:
                session_died = True
                exit_status = self.statuses.pop(pid)
                self.kill_all()
            if exit_status is not None and not open_fds:
                break
            left = deadline - time.monotonic()
            if left <= 0 and exit_status is None:
                timed_out = True
                self.kill_all()
                for fd in open_fds:
                    truncated |= _drain(fd, bufs[fd], cap)
                break
            watch = list(open_fds) + [self.wake_r]
            if stateful and exit_status is None and self.session_sock is not None:
                watch.append(self.session_sock.fileno())
            ready, _, _ = select.select(watch, [], [], max(0.0, min(left, 1.0)) if exit_status is None else 1.0)
            if self.wake_r in ready:
                self._drain_wake()
            for fd in list(open_fds):
                if fd in ready:
                    chunk = os.read(fd, CHUNK)
                    if not chunk:
                        open_fds.discard(fd)
                    elif len(bufs[fd]) < cap:
                        bufs[fd] += chunk
                    else:
                        truncated = True  # keep draining so the writer never blocks on a full pipe
            if self.session_sock is not None and self.session_sock.fileno() in ready:
                reply = self.session_sock.recv(64)
                if reply:
                    exit_status = int(reply.decode())
                    # Background processes may keep the pipes open: take what is there, do not wait.
                    for fd in list(open_fds):
                        truncated |= _drain(fd, bufs[fd], cap)
                    open_fds.clear()
                else:
                    session_died = True
        for fd in (out_r, err_r):
            os.close(fd)
        for fd, buf in bufs.items():
            if len(buf) > cap:
                del buf[cap:]
                truncated = True
        duration = time.monotonic() - start
        stdout, stderr = bytes(bufs[out_r]), notice + bytes(bufs[err_r])
        oom = _oom_kills() > oom_before

        if timed_out:
            status, code_out = "timeout", None
        else:
            if stateful and not session_died:
                code_out = exit_status
                killed = False
            else:
                code_out = _exit_code(exit_status)
                killed = os.WIFSIGNALED(exit_status) and os.WTERMSIG(exit_status) == signal.SIGKILL
            if oom and (killed or (code_out or 0) != 0):
                status = "oom"
            elif code_out != 0 and b"MemoryError" in stderr[-4096:]:
                status = "oom"
            else:
                status = "ok" if code_out == 0 else "error"
        if stateful and (timed_out or session_died):
            self.session_lost = "timeout" if timed_out else f"it exited with {code_out}"
        return {
            "status": status,
            "exit_code": code_out,
            "stdout": base64.b64encode(stdout).decode(),
            "stderr": base64.b64encode(stderr).decode(),
            "truncated": truncated,
            "duration": duration,
        }

    def _session_start(self, out_w: int, err_w: int, code: str) -> int:
        """Hand `code` to the session process (forking it first if needed); return its pid."""
        if self.session_pid is None:
            parent, child = socket.socketpair()
            pid = os.fork()
            if pid == 0:
                parent.close()
                devnull = os.open(os.devnull, os.O_WRONLY)
                self._child_setup(devnull, devnull, keep=(child.fileno(),))
                _session_loop(child)
            child.close()
            self.session_pid, self.session_sock = pid, parent
        data = code.encode("utf-8", "surrogatepass")
        socket.send_fds(self.session_sock, [struct.pack(">I", len(data))], [out_w, err_w])
        self.session_sock.sendall(data)
        return self.session_pid

    def serve(self) -> None:
        _preload()
        os.makedirs(WORKDIR, exist_ok=True)
        os.chdir(WORKDIR)
        self.send({"ready": True})
        while True:
            request = self.recv()
            if request is None:
                return
            header, payload = request
            try:
                reply = self.handle(header, payload)
            except Exception as exc:  # report, never die: the host decides what to do with the sandbox
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
            reply["id"] = header.get("id")
            self.send(reply)


def _drain(fd: int, buf: bytearray, cap: int) -> bool:
    """Read what is immediately available from fd; True if anything was cut."""
    os.set_blocking(fd, False)
    cut = False
    try:
        while True:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                break
            if len(buf) < cap:
                buf += chunk
            else:
                cut = True
    except BlockingIOError:
        pass
    return cut


def _wipe(directory: str) -> None:
    try:
        entries = os.listdir(directory)
    except OSError:
        return
    for name in entries:
        path = os.path.join(directory, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass


def _exit_code(status: int | None) -> int | None:
    if status is None:
        return None
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _run_code(code: str, namespace: dict) -> int:
    """Run code as `python -c` would; return the exit code it asks for."""
    import linecache

    linecache.cache["<sandbox>"] = (len(code), None, code.splitlines(True), "<sandbox>")
    try:
        exec(compile(code, "<sandbox>", "exec"), namespace)
        return 0
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code & 0xFF
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:
        etype, value, tb = sys.exc_info()
        # Drop this frame so the traceback reads as if the code ran under `python -c`.
        traceback.print_exception(etype, value, tb.tb_next if tb is not None and tb.tb_next else tb)
        return 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass


def _fresh_namespace() -> dict:
    import builtins

    return {"__name__": "__main__", "__builtins__": builtins}


def _run_child(code: str) -> None:
    """Body of a stateless child: run, honour atexit and non-daemon threads, exit without unwinding."""
    status = 1
    try:
        sys.argv = ["-c"]
        status = _run_code(code, _fresh_namespace())
        try:
            import threading

            threading._shutdown()  # type: ignore[attr-defined]  # join non-daemon threads as python does
            import atexit

            atexit._run_exitfuncs()
        except BaseException:
            pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
    finally:
        os._exit(status)


def _session_loop(sock: socket.socket) -> None:
    """Body of the stateful session process: one namespace, one cell at a time."""
    namespace = _fresh_namespace()
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        while True:
            msg, fds, _, _ = socket.recv_fds(sock, 4, 2)
            if not msg:
                break
            (length,) = struct.unpack(">I", msg)
            data = b""
            while len(data) < length:
                chunk = sock.recv(min(CHUNK, length - len(data)))
                if not chunk:
                    raise EOFError
                data += chunk
            os.dup2(fds[0], 1)
            os.dup2(fds[1], 2)
            for fd in fds:
                os.close(fd)
            status = _run_code(data.decode("utf-8", "surrogatepass"), namespace)
            # Drop our ends of this cell's pipes so the runner sees only what background work still holds.
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            sock.sendall(str(status).encode())
    finally:
        os._exit(0)


def _init(server_pid: int) -> None:
    """PID 1: reap every orphan (zombies count against the pid limit); end with the server."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(1)
        except InterruptedError:
            continue
        if pid == server_pid:
            os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lifetime", type=float, default=7200.0, help="seconds before the container ends itself")
    args = parser.parse_args()
    _set_non_dumpable()
    # The server is not PID 1 on purpose: code that kills its parent (or everything) really ends the server,
    # the host sees the stream close and reports an error, instead of the signal being silently ignored.
    server = os.fork()
    if server != 0:
        _init(server)
    try:
        Runner(args.lifetime).serve()
    except OSError as exc:
        if exc.errno not in (errno.EPIPE, errno.EBADF):
            raise


if __name__ == "__main__":
    main()
