"""The MedGym sandbox runner: the one program that both backends run (the image build copies this file in).

It pre-imports the scientific stack once, then serves framed requests on stdin and answers on stdout:

    request  = 4-byte big-endian length + JSON header [+ header["size"] raw bytes, for "put"]
    response = 4-byte big-endian length + JSON

Ops: `ping`, `exec` (run code, stateless in a forked child or stateful in one long-lived session process),
`put` (write an uploaded file into /work). The runner enforces the deadline and the output cap itself; hosts only
keep a backstop. Everything the agent's code prints is data: the runner's own messages travel only in the framing,
on descriptors that are closed in every process that runs agent code.

Two modes, chosen by the first argument:
- `container`: the main process of a locked-down container (docker backend); the container gives the root.
- `process`: started as root by the `process` backend under `unshare` (new PID/mount/net/IPC/UTS namespaces). It
  first builds an empty root (`_build_root`): the task runtime (a virtual environment installed from the pinned
  lock) and the interpreter read-only, a synthetic /etc, its own /dev with its own devpts, its own /proc, and /work,
  /tmp, /dev/shm as tmpfs capped in bytes and inodes. Nothing else of the host is there. It pivots into that root
  and execs the runtime's interpreter on itself in `serve` mode. Agent code then runs under a uid of its own
  (given by the host, unique per live sandbox) with rlimits and no_new_privs.

In both modes every process that runs agent code is under a seccomp filter (`_seccomp_program`) at least as strict
as Docker's default profile on what matters here: no keyrings, no namespaces, no mounts, no io_uring, no bpf, no
perf events, no ptrace.

Self-contained on purpose: standard library only (plus the optional preloads), nothing from the repository.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import errno
import json
import os
import platform
import select
import signal
import socket
import stat
import struct
import sys
import time
import traceback

WORKDIR = "/work"
RUNNER_IN_ROOT = "/opt/medgym/runner.py"
PRELOAD = ("numpy", "pandas")
CHUNK = 65536
MAX_REQUEST = 1 << 30
OOM_MARKERS = (b"MemoryError", b"std::bad_alloc", b"Cannot allocate memory")

_libc = ctypes.CDLL(None, use_errno=True)

# ---------------------------------------------------------------------------------------------- seccomp
# Syscall numbers per architecture for what agent code is refused (EPERM). clone3 answers ENOSYS, as in Docker's
# profile, so that glibc falls back to clone(), whose flags a filter can inspect; clone with namespace flags is
# refused. Names are kept beside the numbers so that a reader can check them against the kernel's tables.
_DENY = {
    "x86_64": {
        "ptrace": 101, "syslog": 103, "vhangup": 153, "pivot_root": 155, "adjtimex": 159, "chroot": 161, "acct": 163,
        "settimeofday": 164, "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169,
        "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173, "init_module": 175,
        "delete_module": 176, "quotactl": 179, "lookup_dcookie": 212, "clock_settime": 227, "mbind": 237,
        "set_mempolicy": 238, "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250,
        "migrate_pages": 256, "unshare": 272, "move_pages": 279, "perf_event_open": 298, "fanotify_init": 300,
        "name_to_handle_at": 303, "open_by_handle_at": 304, "clock_adjtime": 305, "setns": 308,
        "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "finit_module": 313,
        "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442,
        "quotactl_fd": 443, "set_mempolicy_home_node": 450,
    },
    "aarch64": {
        "lookup_dcookie": 18, "umount2": 39, "mount": 40, "pivot_root": 41, "chroot": 51, "vhangup": 58,
        "quotactl": 60, "acct": 89, "unshare": 97, "kexec_load": 104, "init_module": 105, "delete_module": 106,
        "clock_settime": 112, "syslog": 116, "ptrace": 117, "reboot": 142, "sethostname": 161,
        "setdomainname": 162, "settimeofday": 170, "adjtimex": 171, "add_key": 217, "request_key": 218,
        "keyctl": 219, "swapon": 224, "swapoff": 225, "mbind": 235, "set_mempolicy": 237, "migrate_pages": 238,
        "move_pages": 239, "perf_event_open": 241, "fanotify_init": 262, "name_to_handle_at": 264,
        "open_by_handle_at": 265, "clock_adjtime": 266, "setns": 268, "process_vm_readv": 270,
        "process_vm_writev": 271, "kcmp": 272, "finit_module": 273, "bpf": 280, "userfaultfd": 282,
        "kexec_file_load": 294, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442, "quotactl_fd": 443,
        "set_mempolicy_home_node": 450,
    },
}
_ARCH = {"x86_64": (0xC000003E, 56, 435), "aarch64": (0xC00000B7, 220, 435)}  # audit arch, clone, clone3
_X32_BIT = 0x40000000
# CLONE_NEWTIME | CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | NEWNET
_CLONE_NS_FLAGS = 0x00000080 | 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
_RET_ALLOW, _RET_ERRNO, _RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
_LD_ABS_W, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06


def _seccomp_program(machine: str | None = None) -> bytes:
    """A classic BPF program (struct sock_filter[]) for SECCOMP_MODE_FILTER; see the table above."""
    machine = machine or platform.machine()
    if machine not in _DENY:
        raise OSError(errno.ENOSYS, f"no seccomp table for {machine}")
    audit_arch, clone_nr, clone3_nr = _ARCH[machine]
    # (code, jump-true label, jump-false label, k); labels are resolved to relative offsets below.
    prog: list[tuple[int, str | None, str | None, int]] = [
        (0x20, None, None, 4),  # A = seccomp_data.arch
        (_JEQ, "next", "kill", audit_arch),
        (_LD_ABS_W, None, None, 0),  # A = seccomp_data.nr
    ]
    if machine == "x86_64":
        prog.append((_JGE, "deny", "next", _X32_BIT))  # the x32 ABI aliases every syscall: refuse it whole
    prog.append((_JEQ, "enosys", "next", clone3_nr))
    prog.append((_JEQ, "clone", "next", clone_nr))
    for nr in sorted(set(_DENY[machine].values())):
        prog.append((_JEQ, "deny", "next", nr))
    prog.append((_RET, None, None, _RET_ALLOW))
    labels = {"clone": len(prog)}
    prog.append((_LD_ABS_W, None, None, 16))  # A = low 32 bits of args[0] (little-endian): clone's flags
    prog.append((_JSET, "deny", "next", _CLONE_NS_FLAGS))
    prog.append((_RET, None, None, _RET_ALLOW))
    labels["deny"] = len(prog)
    prog.append((_RET, None, None, _RET_ERRNO | errno.EPERM))
    labels["enosys"] = len(prog)
    prog.append((_RET, None, None, _RET_ERRNO | errno.ENOSYS))
    labels["kill"] = len(prog)
    prog.append((_RET, None, None, _RET_KILL_PROCESS))
    out = bytearray()
    for i, (code, jt, jf, k) in enumerate(prog):
        rel = [0 if lab in (None, "next") else labels[lab] - i - 1 for lab in (jt, jf)]
        if not all(0 <= r <= 255 for r in rel):
            raise ValueError("seccomp jump out of range")
        out += struct.pack("=HBBI", code, rel[0], rel[1], k)
    return bytes(out)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _install_seccomp(program: bytes) -> None:
    """no_new_privs, then the filter (inherited by every child and kept across execve)."""
    if _libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if _libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


# ---------------------------------------------------------------------------------------------- the empty root
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
MNT_DETACH = 2


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    if _libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {src} -> {target}: {os.strerror(err)}")


def _bind_ro(src: str, target: str) -> None:
    """A read-only, nosuid, nodev bind of one host path (no submounts)."""
    if os.path.isdir(src):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    _mount(src, target, None, MS_BIND)
    _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _tmpfs(target: str, size_mb: int, inodes: int, mode: str, owner: int | None = None, noexec: bool = False) -> None:
    os.makedirs(target, exist_ok=True)
    opts = f"size={size_mb}m,nr_inodes={inodes},mode={mode}"
    if owner is not None:
        opts += f",uid={owner},gid={owner}"
    _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | (MS_NOEXEC if noexec else 0), opts)


def _write(path: str, text: str, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)
    os.chmod(path, mode)


def _build_root(cfg: dict) -> None:
    """Build the sandbox's whole file system under cfg["root"] and pivot into it (process mode, as root)."""
    root, uid = cfg["root"], cfg["uid"]
    disk = cfg["disk"]
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount propagates back to the host
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,nr_inodes=4096,mode=0755")
    # The system's shared libraries and the interpreter, read-only. A merged-/usr host has /bin, /lib... as links.
    for top in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = "/" + top
        if os.path.islink(host):
            os.symlink(os.readlink(host), os.path.join(root, top))
        elif os.path.isdir(host):
            _bind_ro(host, root + host)
    for path in cfg["binds"]:  # the interpreter's prefix (when outside /usr) and the task runtime
        _bind_ro(path["src"], root + path["dst"])
    for path in cfg["masks"]:  # the host interpreter's own site-packages: the runtime's libraries only
        if os.path.isdir(root + path):
            _mount("tmpfs", root + path, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=4k,nr_inodes=4,mode=0555")
    _bind_ro(cfg["runner"], root + RUNNER_IN_ROOT)
    etc = root + "/etc"
    for name in ("ld.so.cache", "ld.so.conf", "localtime"):
        if os.path.isfile("/etc/" + name):
            _write(f"{etc}/{name}", "")
            _bind_ro(os.path.realpath("/etc/" + name), f"{etc}/{name}")
    _write(f"{etc}/passwd", f"root:x:0:0::/:/usr/sbin/nologin\nsandbox:x:{uid}:{uid}::{WORKDIR}:/usr/sbin/nologin\n")
    _write(f"{etc}/group", f"root:x:0:\nsandbox:x:{uid}:\n")
    _write(f"{etc}/hosts", "127.0.0.1 localhost\n::1 localhost\n")
    _write(f"{etc}/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files\n")
    # Its own /dev: a few character devices of the host, a devpts instance of its own, a capped /dev/shm.
    dev = root + "/dev"
    _tmpfs(dev, 1, 64, "0755")
    for name in ("null", "zero", "full", "random", "urandom"):
        _bind_ro("/dev/" + name, f"{dev}/{name}")
        _mount(None, f"{dev}/{name}", None, MS_REMOUNT | MS_BIND | MS_NOSUID)  # writable, as /dev/null must be
    os.makedirs(f"{dev}/pts")
    _mount("devpts", f"{dev}/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
    os.symlink("pts/ptmx", f"{dev}/ptmx")
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{i}", f"{dev}/{name}")
    os.symlink("/proc/self/fd", f"{dev}/fd")
    _tmpfs(f"{dev}/shm", disk["shm_mb"], disk["inodes"], "1777")
    _tmpfs(root + WORKDIR, disk["work_mb"], disk["inodes"], "0700", owner=uid)
    _tmpfs(root + "/tmp", disk["tmp_mb"], disk["inodes"], "1777")
    os.makedirs(root + "/var", exist_ok=True)
    os.symlink("/tmp", root + "/var/tmp")
    os.makedirs(root + "/proc")
    _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    # Swap roots and drop the host's: from here on the host's file system is unreachable.
    os.chdir(root)
    os.makedirs(root + "/.old")
    if _libc.syscall(155 if platform.machine() == "x86_64" else 41, b".", b".old") != 0:  # pivot_root
        raise OSError(ctypes.get_errno(), "pivot_root")
    os.chroot(".")
    os.chdir("/")
    if _libc.umount2(b"/.old", MNT_DETACH) != 0:
        raise OSError(ctypes.get_errno(), "umount /.old")
    os.rmdir("/.old")
    _mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _loopback_up() -> None:
    """A new net namespace has only `lo`, down; bring it up so code can use localhost within the sandbox."""
    import fcntl

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, siocgifflags, ifr))[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sh", b"lo", flags | iff_up))


# ---------------------------------------------------------------------------------------------- the server
def _oom_kills() -> int:
    """The memory cgroup's OOM-kill counter (v2 memory.events or v1 memory.oom_control); 0 without one."""
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


def _vm_size_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


class Runner:
    """Serves one sandbox. `cfg` says who agent code runs as and which limits the runner applies itself."""

    def __init__(self, cfg: dict, proto_in: int, proto_out: int) -> None:
        self.cfg = cfg
        self.uid = cfg.get("uid")  # process mode: drop to this uid; container mode: already unprivileged
        self.limits = cfg["limits"]
        self.seccomp = _seccomp_program()
        self.proto_in, self.proto_out = proto_in, proto_out
        self.deadline_life = time.monotonic() + float(cfg.get("lifetime_s", 7200.0))
        self.inbuf = b""
        self.statuses: dict[int, int] = {}
        self.session_pid: int | None = None
        self.session_sock: socket.socket | None = None
        self.session_lost: str | None = None
        self.as_limit = 0
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)

    # ---- framing -------------------------------------------------------------------------------
    def send(self, obj: dict) -> None:
        data = json.dumps(obj).encode()
        view = memoryview(struct.pack(">I", len(data)) + data)
        while view:
            view = view[os.write(self.proto_out, view) :]

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
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.statuses[pid] = status

    def _others(self, spare: int | None) -> list[int]:
        me = os.getpid()
        return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me, spare)]

    def kill_all(self, spare: int | None = None) -> None:
        """SIGKILL every process of the sandbox but PID 1, this server and `spare`, until none is left."""
        for _ in range(1000):
            pids = self._others(spare)
            if not pids:
                break
            if spare is None:
                with contextlib.suppress(ProcessLookupError):  # everything we may signal, fork bombs too, at once
                    os.kill(-1, signal.SIGKILL)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            self.reap()
            time.sleep(0.001)
        self.reap()

    def _end_session(self) -> None:
        self.kill_all()
        if self.session_sock is not None:
            self.session_sock.close()
        self.session_pid, self.session_sock = None, None
        self.statuses.clear()

    def _child_setup(self, out_w: int, err_w: int, keep: tuple[int, ...] = (), cpu_s: int | None = None) -> None:
        """In a fresh child: stdio on the exec's pipes, every other descriptor closed, limits, the uid, seccomp."""
        import resource

        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, min(keep) if keep else 65536)
        if keep:
            os.closerange(max(keep) + 1, 65536)
        try:  # the agent's process is the OOM killer's first choice, never the runner
            with open("/proc/self/oom_score_adj", "w") as fh:
                fh.write("1000")
        except OSError:
            pass
        lim, mb = self.limits, 1024 * 1024
        resource.setrlimit(resource.RLIMIT_NOFILE, (lim["max_open_files"],) * 2)
        resource.setrlimit(resource.RLIMIT_FSIZE, (lim["max_file_mb"] * mb,) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if cpu_s is not None:
            resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        if self.uid is not None:  # process mode: no cgroup, so the runner caps memory and processes itself
            resource.setrlimit(resource.RLIMIT_AS, (self.as_limit,) * 2)
            resource.setrlimit(resource.RLIMIT_NPROC, (lim["max_processes"],) * 2)
            os.setgroups([])
            os.setresgid(self.uid, self.uid, self.uid)
            os.setresuid(self.uid, self.uid, self.uid)
        os.chdir(WORKDIR)
        _install_seccomp(self.seccomp)

    # ---- requests ------------------------------------------------------------------------------
    def handle(self, header: dict, payload: bytes) -> dict:
        op = header.get("op")
        if op == "ping":
            return {"ok": True}
        if op == "exec":
            return self.exec(header)
        if op == "put":
            return self.put(header, payload)
        return {"ok": False, "error": f"unknown op {op!r}"}

    def put(self, header: dict, payload: bytes) -> dict:
        """Write one file under /work without following any link the sandboxed code may have planted."""
        rel = str(header["path"])
        parts = [p for p in rel.split("/") if p not in ("", ".")]
        if not parts or rel.startswith("/") or ".." in parts:
            return {"ok": False, "error": f"{rel!r} is not a path inside {WORKDIR}"}
        nofollow = os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            dirfd = os.open(WORKDIR, os.O_RDONLY | os.O_DIRECTORY | nofollow)
        except OSError as exc:
            return {"ok": False, "error": f"{WORKDIR}: {exc.strerror}"}
        try:
            for i, name in enumerate(parts[:-1]):
                try:
                    os.mkdir(name, 0o755, dir_fd=dirfd)
                    if self.uid is not None:
                        os.chown(name, self.uid, self.uid, dir_fd=dirfd, follow_symlinks=False)
                except FileExistsError:
                    pass
                try:
                    nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | nofollow, dir_fd=dirfd)
                except OSError as exc:
                    where = "/".join(parts[: i + 1])
                    why = "is a link or not a directory" if exc.errno in (errno.ELOOP, errno.ENOTDIR) else exc.strerror
                    return {"ok": False, "error": f"refusing to upload through {where!r}: it {why}"}
                os.close(dirfd)
                dirfd = nxt
            name = parts[-1]
            try:
                st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
                if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                    return {"ok": False, "error": f"refusing to upload onto {rel!r}: it is not a regular file"}
                # A planted file or link (read-only, hard-linked, pointing anywhere) is removed, never written through.
                os.unlink(name, dir_fd=dirfd)
            except FileNotFoundError:
                pass
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | nofollow, int(header.get("mode", 0o644)) & 0o755,
                         dir_fd=dirfd)
            try:
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view) :]
                if self.uid is not None:
                    os.fchown(fd, self.uid, self.uid)
            finally:
                os.close(fd)
        except OSError as exc:
            return {"ok": False, "error": f"{rel}: {exc.strerror}"}
        finally:
            os.close(dirfd)
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
            pid = self._session_send(out_w, err_w, code)
        else:
            pid = os.fork()
            if pid == 0:
                try:
                    self._child_setup(out_w, err_w, cpu_s=int(timeout) + 2)
                except BaseException:  # noqa: BLE001 - never fall back into the server's loop
                    os._exit(71)
                _run_child(code)
        os.close(out_w)
        os.close(err_w)
        for fd in (out_r, err_r):
            os.set_blocking(fd, False)

        bufs = {out_r: bytearray(), err_r: bytearray()}
        open_fds = {out_r, err_r}
        truncated = timed_out = session_died = False
        exit_status: int | None = None  # waitpid status (stateless) or reported code (stateful)

        def read(fd: int) -> None:
            nonlocal truncated
            try:
                chunk = os.read(fd, CHUNK)
            except BlockingIOError:
                return
            if not chunk:
                open_fds.discard(fd)
            elif len(bufs[fd]) < cap:
                bufs[fd] += chunk
            else:
                truncated = True  # keep draining so the writer never blocks on a full pipe

        while True:
            self.reap()
            if exit_status is None and pid in self.statuses:
                session_died = stateful
                exit_status = self.statuses.pop(pid)
                self.kill_all()  # leftovers of the child; closes the pipes they hold
            if exit_status is not None and not open_fds:
                break
            left = deadline - time.monotonic()
            if left <= 0 and exit_status is None:
                timed_out = True
                self.kill_all()
                for fd in list(open_fds):
                    truncated |= _drain(fd, bufs[fd], cap)
                break
            watch = list(open_fds) + [self.wake_r]
            if stateful and exit_status is None and self.session_sock is not None:
                watch.append(self.session_sock.fileno())
            wait = max(0.0, min(left, 1.0)) if exit_status is None else 1.0
            ready, _, _ = select.select(watch, [], [], wait)
            if not ready and exit_status is not None:
                break  # a grandchild we cannot reach keeps a pipe open: take what we have
            if self.wake_r in ready:
                self._drain_wake()
            for fd in list(open_fds):
                if fd in ready:
                    read(fd)
            if self.session_sock is not None and self.session_sock.fileno() in ready:
                reply = self.session_sock.recv(64)
                if reply:
                    exit_status = int(reply.decode())
                    self.kill_all(spare=pid)  # background processes of the cell go; the session stays
                    for fd in list(open_fds):
                        truncated |= _drain(fd, bufs[fd], cap)
                    open_fds.clear()
                else:
                    session_died = True
        for fd in (out_r, err_r):
            os.close(fd)
        for buf in bufs.values():
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
                code_out, signalled = exit_status, None
            else:
                code_out = _exit_code(exit_status)
                signalled = os.WTERMSIG(exit_status) if os.WIFSIGNALED(exit_status) else None
            if signalled == signal.SIGXCPU:
                status = "timeout"
            elif (oom and (signalled == signal.SIGKILL or code_out != 0)) or (
                code_out != 0 and any(m in stderr[-4096:] for m in OOM_MARKERS)
            ):
                status = "oom"
            else:
                status = "ok" if code_out == 0 else "error"
        if stateful and (timed_out or session_died):
            self._end_session()
            self.session_lost = "timeout" if timed_out else f"it exited with {code_out}"
        elif stateful:
            os.kill(pid, signal.SIGSTOP)  # frozen between execs: threads it left cannot run or race uploads
        return {
            "status": status,
            "exit_code": code_out,
            "stdout": base64.b64encode(stdout).decode(),
            "stderr": base64.b64encode(stderr).decode(),
            "truncated": truncated,
            "duration": duration,
        }

    def _session_send(self, out_w: int, err_w: int, code: str) -> int:
        """Hand `code` to the session process (forking it first if needed); return its pid."""
        if self.session_pid is None:
            parent, child = socket.socketpair()
            pid = os.fork()
            if pid == 0:
                try:
                    parent.close()
                    devnull = os.open(os.devnull, os.O_WRONLY)
                    self._child_setup(devnull, devnull, keep=(child.fileno(),))
                except BaseException:  # noqa: BLE001
                    os._exit(71)
                _session_loop(child)
            child.close()
            self.session_pid, self.session_sock = pid, parent
        else:
            os.kill(self.session_pid, signal.SIGCONT)
        data = code.encode("utf-8", "surrogatepass")
        try:
            socket.send_fds(self.session_sock, [struct.pack(">I", len(data))], [out_w, err_w])
            self.session_sock.sendall(data)
        except OSError:
            pass  # the session died; the exec loop sees its exit status
        return self.session_pid

    def serve(self) -> None:
        for mod in self.cfg.get("preload", PRELOAD):
            with contextlib.suppress(Exception):  # a missing module only costs speed; user code reports its own
                __import__(mod)
        import gc

        gc.collect()
        gc.freeze()  # keep preloaded objects out of the children's GC passes (less copy-on-write)
        # Address space (process mode): what the preloaded runtime maps plus the memory budget.
        self.as_limit = _vm_size_bytes() + self.limits["memory_mb"] * 1024 * 1024
        os.chdir(WORKDIR)
        self.send({"ready": True, "python": sys.version.split()[0]})
        while True:
            request = self.recv()
            if request is None:
                return
            header, payload = request
            try:
                reply = self.handle(header, payload)
            except Exception as exc:  # noqa: BLE001 - report, never die: the host decides what to do
                self.kill_all()
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


def _exit_code(status: int | None) -> int | None:
    if status is None:
        return None
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


# ---------------------------------------------------------------------------------------------- agent side
def _fresh_stdio() -> None:
    import io

    # line-buffered so that what code printed before a timeout kill reaches the caller
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                                  line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                                  line_buffering=True)
    sys.__stdout__, sys.__stderr__, sys.__stdin__ = sys.stdout, sys.stderr, sys.stdin


def _run_code(code: str, namespace: dict) -> int:
    """Run code as `python -c` would; return the exit code it asks for."""
    import linecache

    linecache.cache["<sandbox>"] = (len(code), None, code.splitlines(True), "<sandbox>")
    try:
        exec(compile(code, "<sandbox>", "exec"), namespace)  # noqa: S102 - running untrusted code is the point
        return 0
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code & 0xFF
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001
        etype, value, tb = sys.exc_info()
        # Drop this frame so the traceback reads as if the code ran under `python -c`.
        try:
            traceback.print_exception(etype, value, tb.tb_next if tb is not None and tb.tb_next else tb)
        except MemoryError:
            os.write(2, f"{etype.__name__}: {value}\n".encode())
        return 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # user code may have closed or replaced the stream
                stream.flush()


def _fresh_namespace() -> dict:
    import builtins

    return {"__name__": "__main__", "__builtins__": builtins}


def _run_child(code: str) -> None:
    """Body of a stateless child: run, honour atexit and non-daemon threads, exit without unwinding."""
    status = 1
    try:
        _fresh_stdio()
        sys.argv = ["-c"]
        sys.path[:0] = [""]  # like `python -c`: the working dir is importable
        status = _run_code(code, _fresh_namespace())
        try:
            import threading

            threading._shutdown()  # type: ignore[attr-defined]  # join non-daemon threads as python does
            import atexit

            atexit._run_exitfuncs()
        except BaseException:  # noqa: BLE001
            pass
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
    finally:
        os._exit(status)


def _session_loop(sock: socket.socket) -> None:
    """Body of the stateful session process: one namespace, one cell at a time."""
    namespace = _fresh_namespace()
    devnull = os.open(os.devnull, os.O_WRONLY)
    sys.argv = ["-c"]
    sys.path[:0] = [""]
    me = os.getpid()
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
            _fresh_stdio()
            status = _run_code(data.decode("utf-8", "surrogatepass"), namespace)
            if os.getpid() != me:  # a child the cell forked fell through to here: it must not answer
                os._exit(status)
            # Drop our ends of this cell's pipes so the runner sees only what background work still holds.
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            sock.sendall(str(status).encode())
    finally:
        os._exit(0)


# ---------------------------------------------------------------------------------------------- entry points
def _init(server_pid: int) -> None:
    """PID 1: reap every orphan (zombies count against the process cap); end with the server."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(1)
        except InterruptedError:
            continue
        if pid == server_pid:
            os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def _serve(cfg: dict) -> None:
    # Same-uid code (container mode) could otherwise open /proc/<runner>/fd/* and write into the protocol stream.
    _libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
    # Keep the protocol on private descriptors; 0/1/2 become /dev/null so that nothing inherits them.
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    os.close(devnull)
    # The server is not PID 1: code that kills everything it may (container mode) really ends the server, and the
    # host sees the stream close, instead of the signal being silently ignored by an init process.
    server = os.fork()
    if server != 0:
        os.close(proto_in)
        os.close(proto_out)
        _init(server)
    try:
        Runner(cfg, proto_in, proto_out).serve()
    except OSError as exc:
        if exc.errno not in (errno.EPIPE, errno.EBADF):
            raise


def main() -> None:
    mode, cfg = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    if mode == "process":  # stage one, as root on the host's interpreter: build the root, then become `serve`
        _build_root(cfg)
        try:
            _loopback_up()
        except OSError as exc:
            sys.stderr.write(f"[runner] could not bring lo up: {exc}\n")
        os.execve(cfg["python"], [cfg["python"], "-I", RUNNER_IN_ROOT, "serve", json.dumps(cfg)], cfg["env"])
    _serve(cfg)


if __name__ == "__main__":
    main()
