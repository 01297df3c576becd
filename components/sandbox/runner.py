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
from collections.abc import Iterator

WORKDIR = "/work"
RUNNER_IN_ROOT = "/opt/medgym/runner.py"
RUNTIME_IN_ROOT = "/opt/medgym/env"
PYTHON_IN_ROOT = "/opt/medgym/python"
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
        "inotify_init": 253, "inotify_add_watch": 254, "inotify_init1": 294, "fanotify_mark": 301,
        "migrate_pages": 256, "unshare": 272, "move_pages": 279, "perf_event_open": 298, "fanotify_init": 300,
        "name_to_handle_at": 303, "open_by_handle_at": 304, "clock_adjtime": 305, "setns": 308,
        "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "finit_module": 313,
        "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442,
        "quotactl_fd": 443, "set_mempolicy_home_node": 450,
    },
    "aarch64": {
        "inotify_init1": 26, "inotify_add_watch": 27, "fanotify_mark": 263,
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
_SOCKET = {"x86_64": (41, 53), "aarch64": (198, 199)}  # socket, socketpair
# Sockets: AF_UNIX and AF_INET/AF_INET6 (which reach only the sandbox's own loopback). Every other family (AF_VSOCK,
# AF_NETLINK, AF_PACKET, AF_ALG, ...) either crosses the network namespace or reaches kernel code no task needs.
_AF_UNIX, _AF_INET, _AF_INET6 = 1, 2, 10
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
    socket_nr, socketpair_nr = _SOCKET[machine]
    prog.append((_JEQ, "enosys", "next", clone3_nr))
    prog.append((_JEQ, "clone", "next", clone_nr))
    prog.append((_JEQ, "socket", "next", socket_nr))
    prog.append((_JEQ, "socketpair", "next", socketpair_nr))
    for nr in sorted(set(_DENY[machine].values())):
        prog.append((_JEQ, "deny", "next", nr))
    prog.append((_RET, None, None, _RET_ALLOW))
    labels = {"clone": len(prog)}
    prog.append((_LD_ABS_W, None, None, 16))  # A = low 32 bits of args[0] (little-endian): clone's flags
    prog.append((_JSET, "deny", "allow", _CLONE_NS_FLAGS))
    labels["socket"] = len(prog)
    prog.append((_LD_ABS_W, None, None, 16))  # A = args[0]: the address family
    prog.append((_JEQ, "allow", "next", _AF_INET))
    prog.append((_JEQ, "allow", "next", _AF_INET6))
    labels["socketpair"] = len(prog)
    prog.append((_LD_ABS_W, None, None, 16))
    prog.append((_JEQ, "allow", "next", _AF_UNIX))
    prog.append((_RET, None, None, _RET_ERRNO | errno.EAFNOSUPPORT))
    labels["deny"] = len(prog)
    prog.append((_RET, None, None, _RET_ERRNO | errno.EPERM))
    labels["enosys"] = len(prog)
    prog.append((_RET, None, None, _RET_ERRNO | errno.ENOSYS))
    labels["kill"] = len(prog)
    prog.append((_RET, None, None, _RET_KILL_PROCESS))
    labels["allow"] = len(prog)
    prog.append((_RET, None, None, _RET_ALLOW))
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
MNT_DETACH, MS_MOVE = 2, 8192


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    if _libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {src} -> {target}: {os.strerror(err)}")


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


def _flags_of(path: str) -> int:
    """The mount flags a bind of `path` must keep: inside a user namespace the kernel refuses to drop any of them."""
    st = os.statvfs(path).f_flag
    pairs = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC), (os.ST_NOATIME, 1024),
             (os.ST_NODIRATIME, 2048), (os.ST_RELATIME, 1 << 21))
    return sum(ms for st_flag, ms in pairs if st & st_flag)


def _bind(src: str, target: str, writable: bool = False) -> None:
    """A bind of one host path (no submounts): read-only, nosuid and nodev unless `writable` (a device)."""
    if os.path.isdir(src):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    _mount(src, target, None, MS_BIND)
    extra = MS_NOSUID if writable else MS_RDONLY | MS_NOSUID | MS_NODEV
    _mount(None, target, None, MS_REMOUNT | MS_BIND | extra | _flags_of(src))


def _copy(src: str, dst: str, mode: int = 0o644) -> None:
    with open(src, "rb") as fh:
        data = fh.read()
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst, "wb") as fh:
        fh.write(data)
    os.chmod(dst, mode)


PROC_NEW = "/.proc"  # where each sandbox mounts its own /proc before moving it over the zygote's
ETC_COPIED = ("ld.so.cache", "ld.so.conf", "localtime")


def _build_template(cfg: dict) -> None:
    """Build the root every sandbox shares, read-only, under cfg["root"] and pivot into it (zygote, stage one).

    Everything sits at a neutral path: the interpreter at /opt/medgym/python, the task runtime as a virtual
    environment at /opt/medgym/env, the runner (a copy) at /opt/medgym/runner.py; nothing in it names the host's
    checkout or interpreter paths. What each sandbox gets of its own (/etc, /work, /tmp, /dev/shm, /dev/pts, /proc)
    is mounted over the empty folders left here, in the sandbox's own mount namespace (`_enter_sandbox`).
    """
    root = cfg["root"]
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount propagates back to the host
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=8m,nr_inodes=4096,mode=0755")
    # The system's shared libraries, read-only. A merged-/usr host has /bin, /lib... as links.
    for top in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = "/" + top
        if os.path.islink(host):
            os.symlink(os.readlink(host), os.path.join(root, top))
        elif os.path.isdir(host):
            _bind(host, root + host)
    # The interpreter at a neutral prefix. The host's package folders (the interpreter's own site-packages, the
    # distribution's dist-packages) are hidden wherever they appear: the runtime's libraries only.
    python, prefix = root + PYTHON_IN_ROOT, cfg["base_prefix"].rstrip("/")
    _bind(prefix, python)
    for folder in cfg["masks"]:
        seen_at = [root + folder] + ([python + folder[len(prefix):]] if folder.startswith(prefix + "/") else [])
        for target in seen_at:
            if os.path.isdir(target):
                _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=4k,nr_inodes=4,mode=0555")
    site = f"lib/python{cfg['python_version']}/site-packages"
    # The task runtime as a virtual environment of that interpreter: its site-packages, a pyvenv.cfg of our own.
    env = root + RUNTIME_IN_ROOT
    _bind(cfg["site_packages"], f"{env}/{site}")
    _write(f"{env}/pyvenv.cfg", f"home = {PYTHON_IN_ROOT}/bin\ninclude-system-site-packages = false\n"
                                f"version = {cfg['python_version']}\n")
    os.makedirs(f"{env}/bin")
    for name in ("python", "python3", f"python{cfg['python_version']}"):
        os.symlink(f"{PYTHON_IN_ROOT}/bin/python{cfg['python_version']}", f"{env}/bin/{name}")
    os.symlink("lib", f"{env}/lib64")
    _copy(cfg["runner"], root + RUNNER_IN_ROOT)
    etc = root + "/etc"
    _write(f"{etc}/hosts", "127.0.0.1 localhost\n::1 localhost\n")
    _write(f"{etc}/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files\n")
    for name in ETC_COPIED:
        if os.path.isfile("/etc/" + name):
            _copy("/etc/" + name, f"{etc}/{name}")
    # /dev: a few character devices of the host; each sandbox mounts its own devpts and /dev/shm here.
    dev = root + "/dev"
    _tmpfs(dev, 1, 64, "0755")
    for name in ("null", "zero", "full", "random", "urandom"):
        _bind("/dev/" + name, f"{dev}/{name}", writable=True)
    for folder in ("pts", "shm"):
        os.makedirs(f"{dev}/{folder}")
    os.symlink("pts/ptmx", f"{dev}/ptmx")
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{i}", f"{dev}/{name}")
    os.symlink("/proc/self/fd", f"{dev}/fd")
    for folder in (WORKDIR, "/tmp", "/var", "/proc", PROC_NEW):
        os.makedirs(root + folder, exist_ok=True)
    os.symlink("/tmp", root + "/var/tmp")
    # The host's /proc, for now: in a user namespace a new procfs may be mounted only where one is already fully
    # visible. Each sandbox mounts its own and moves it over this one (`_enter_sandbox`).
    _mount("/proc", root + "/proc", None, MS_BIND | MS_REC)
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
    _mount(None, "/dev", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    _mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _loopback_up() -> None:
    """A new net namespace has only `lo`, down; bring it up so code can use localhost within the sandbox."""
    import fcntl

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, siocgifflags, ifr))[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sh", b"lo", flags | iff_up))


# ---------------------------------------------------------------------------------------------- cgroups
class Cgroups:
    """Each sandbox's memory and process caps: one cgroup per sandbox (v2, or v1's memory and pids hierarchies).

    Reached only through directory descriptors opened before the zygote pivots (the sandbox has no /sys), under a
    folder of the zygote's own (`medgym-z<pid>`) inside the cgroup the zygote was started in: a delegated subtree
    is enough, root is not needed. The memory cap counts the sandbox's tmpfs pages (the kernel charges shmem to the
    cgroup of the process that wrote it) and leaves no swap to spill into.
    """

    def __init__(self, dirs: dict[str, int], parents: dict[str, int], own: str, v2: bool) -> None:
        self.dirs, self.v2 = dirs, v2  # controller ("memory", "pids"; "unified" on v2) -> fd of the zygote's folder
        self.parents, self.own = parents, own  # the folders it was made in, and its name there: removed at the end

    def state(self) -> dict:
        """What the zygote proper needs to rebuild this object after exec (the descriptors stay open)."""
        return {"dirs": self.dirs, "parents": self.parents, "own": self.own, "v2": self.v2}

    @staticmethod
    def from_state(state: dict) -> Cgroups:
        as_fds = lambda d: {k: int(v) for k, v in d.items()}  # noqa: E731
        return Cgroups(as_fds(state["dirs"]), as_fds(state["parents"]), state["own"], bool(state["v2"]))

    @staticmethod
    def open(pid: int) -> Cgroups | None:
        """The zygote's folders, made; None where this process may not make cgroups with both controllers."""
        paths = {}
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for name in controllers.split(",") if controllers else ["unified"]:
                    paths[name] = path
        v2 = os.path.isfile("/sys/fs/cgroup/cgroup.controllers")
        where = {"unified": "/sys/fs/cgroup" + paths.get("unified", "/")} if v2 else {
            name: f"/sys/fs/cgroup/{name}{paths[name]}" for name in ("memory", "pids") if name in paths}
        if (v2 and not _v2_delegates(where["unified"])) or (not v2 and len(where) < 2):
            return None
        dirs, parents, own = {}, {}, f"medgym-z{pid}"
        try:
            for name, base in where.items():
                _remove_stale_zygotes(base)
                mine = f"{base}/{own}"
                os.makedirs(mine, exist_ok=True)
                if v2:
                    _cg_write(mine, "cgroup.subtree_control", "+memory +pids")
                parents[name] = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
                dirs[name] = os.open(mine, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            for fd in [*dirs.values(), *parents.values()]:
                os.close(fd)
            return None
        return Cgroups(dirs, parents, own, v2)

    def fds(self) -> list[int]:
        return [*self.dirs.values(), *self.parents.values()]

    def close(self) -> None:
        """Remove the zygote's own folders (empty by now: every sandbox's was removed)."""
        for fd in self.parents.values():
            with contextlib.suppress(OSError):
                os.rmdir(self.own, dir_fd=fd)

    def create(self, name: str, memory_bytes: int, pids: int) -> None:
        """Make (or take back, empty, from an ended sandbox) cgroup `name` and set its limits."""
        for fd in self.dirs.values():
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=fd)
        if self.v2:
            folder = self.dirs["unified"]
            _cg_write_at(folder, f"{name}/memory.max", str(memory_bytes))
            _cg_write_at(folder, f"{name}/memory.swap.max", "0", optional=True)
            _cg_write_at(folder, f"{name}/pids.max", str(pids))
        else:
            # v1 keeps limit <= memsw.limit at every write: lift memsw, set the limit, then hold memsw to it
            memory = self.dirs["memory"]
            _cg_write_at(memory, f"{name}/memory.memsw.limit_in_bytes", "-1", optional=True)
            _cg_write_at(memory, f"{name}/memory.limit_in_bytes", str(memory_bytes))
            _cg_write_at(memory, f"{name}/memory.memsw.limit_in_bytes", str(memory_bytes), optional=True)
            _cg_write_at(self.dirs["pids"], f"{name}/pids.max", str(pids))

    def join(self, name: str) -> None:
        for fd in self.dirs.values():
            _cg_write_at(fd, f"{name}/cgroup.procs", str(os.getpid()))

    def oom_counter(self, name: str) -> int:
        """A descriptor the sandbox's server reads its OOM-kill count from (see `oom_kills`)."""
        fd = self.dirs["unified" if self.v2 else "memory"]
        return os.open(f"{name}/{'memory.events' if self.v2 else 'memory.oom_control'}", os.O_RDONLY, dir_fd=fd)

    def empty(self, name: str) -> bool:
        """No process left in cgroup `name`: an ended sandbox's last processes have exited."""
        for fd in self.dirs.values():
            try:
                procs = os.open(f"{name}/cgroup.procs", os.O_RDONLY, dir_fd=fd)
            except FileNotFoundError:
                continue
            try:
                if os.read(procs, 64).strip():
                    return False
            finally:
                os.close(procs)
        return True

    def remove(self, name: str) -> bool:
        """Remove a sandbox's cgroups once its processes are gone; False while some are still exiting."""
        done = True
        for fd in self.dirs.values():
            try:
                os.rmdir(name, dir_fd=fd)
            except FileNotFoundError:
                pass
            except OSError:
                done = False
        return done


def _cg_write(folder: str, name: str, value: str) -> None:
    with open(f"{folder}/{name}", "w") as fh:
        fh.write(value)


def _cg_write_at(dir_fd: int, name: str, value: str, optional: bool = False) -> None:
    try:
        fd = os.open(name, os.O_WRONLY, dir_fd=dir_fd)
    except FileNotFoundError:
        if optional:  # memsw / swap.max exist only where the kernel accounts swap: then there is none to spill to
            return
        raise
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _v2_delegates(base: str) -> bool:
    """On cgroup v2 a child folder can get memory and pids only if this cgroup offers them and may delegate."""
    try:
        with open(f"{base}/cgroup.controllers") as fh:
            offered = set(fh.read().split())
        return {"memory", "pids"} <= offered and os.access(base, os.W_OK)
    except OSError:
        return False


def _remove_stale_zygotes(base: str) -> None:
    """Folders of zygotes that died without cleaning up (their pid is gone): their sandboxes are gone too."""
    with contextlib.suppress(OSError):
        for entry in os.listdir(base):
            if entry.startswith("medgym-z") and entry[8:].isdigit() and not os.path.exists(f"/proc/{entry[8:]}"):
                folder = f"{base}/{entry}"
                for child in os.listdir(folder):
                    with contextlib.suppress(OSError):
                        if os.path.isdir(f"{folder}/{child}"):
                            os.rmdir(f"{folder}/{child}")
                with contextlib.suppress(OSError):
                    os.rmdir(folder)


def oom_kills(fd: int | None) -> int:
    """The OOM-kill counter of a sandbox's memory cgroup (v2 memory.events, v1 memory.oom_control), 0 without one.

    Container mode reads the container's own cgroup at /sys/fs/cgroup."""
    texts = []
    if fd is not None:
        texts.append(os.pread(fd, 4096, 0).decode())
    else:
        for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
            with contextlib.suppress(OSError), open(path) as fh:
                texts.append(fh.read())
    for text in texts:
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    return 0


# ---------------------------------------------------------------------------------------------- the server
def _vm_size_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


class Runner:
    """Serves one sandbox. `cfg` says who agent code runs as and which limits the runner applies itself."""

    def __init__(self, cfg: dict, proto_in: int, proto_out: int, oom_fd: int | None = None) -> None:
        self.cfg = cfg
        self.uid = cfg.get("uid")  # process mode as root: drop to this uid; container mode: already unprivileged
        self.process_mode = cfg.get("mode") == "process"  # no container around it: the runner sets the rlimits
        self.rootless = bool(cfg.get("rootless"))  # process mode in a user namespace: one uid, capabilities dropped
        self.oom_fd = oom_fd
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
                _empty_wakeups(self.wake_r)
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
    def reap(self) -> None:
        self.statuses.update(_reaped())

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
        if self.process_mode:  # per process, beside the sandbox's cgroup: one allocation cannot take the whole budget
            resource.setrlimit(resource.RLIMIT_AS, (self.as_limit,) * 2)
            resource.setrlimit(resource.RLIMIT_NPROC, (lim["max_processes"],) * 2)
        if self.uid is not None:
            os.setgroups([])
            os.setresgid(self.uid, self.uid, self.uid)
            os.setresuid(self.uid, self.uid, self.uid)
        elif self.rootless:
            _drop_capabilities()
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
        oom_before = oom_kills(self.oom_fd)
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
                _empty_wakeups(self.wake_r)
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
        # As PID 1 (process mode) the server also reaps orphans it never waits for: keep only what it may ask after.
        self.statuses = {p: st for p, st in self.statuses.items() if p == self.session_pid}
        for buf in bufs.values():
            if len(buf) > cap:
                del buf[cap:]
                truncated = True
        duration = time.monotonic() - start
        stdout, stderr = bytes(bufs[out_r]), notice + bytes(bufs[err_r])
        oom = oom_kills(self.oom_fd) > oom_before

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
        _preload(self.cfg.get("preload", PRELOAD))  # a no-op in a sandbox forked from the zygote, which did it
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


def _preload(modules: list[str] | tuple[str, ...]) -> None:
    for mod in modules:
        with contextlib.suppress(Exception):  # a missing module only costs speed; user code reports its own
            __import__(mod)
    import gc

    gc.collect()
    gc.freeze()  # keep preloaded objects out of the children's GC passes (less copy-on-write)


_CAP_LAST = 63  # beyond the kernel's last capability PR_CAPBSET_DROP answers EINVAL, which is ignored


def _drop_capabilities() -> None:
    """Rootless process mode: agent code runs as the user namespace's root, so it gives up every capability."""
    for cap in range(_CAP_LAST + 1):
        _libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP
    header = struct.pack("=Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = ctypes.create_string_buffer(24)  # two __user_cap_data_struct, all zero: no effective/permitted/inheritable
    if _libc.syscall(126 if platform.machine() == "x86_64" else 91, header, data) != 0:  # capset
        raise OSError(ctypes.get_errno(), "capset")


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


# ---------------------------------------------------------------------------------------------- the zygote
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
SANDBOX_NAMESPACES = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
MAX_CONTROL_MESSAGE = 1 << 16


def _unshare(flags: int) -> None:
    if _libc.unshare(ctypes.c_int(flags)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare({flags:#x}): {os.strerror(err)}")


def _write_proc(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _enter_user_namespace() -> None:
    """Rootless: become root of a new user namespace that maps only the caller's own uid and gid."""
    uid, gid = os.getuid(), os.getgid()
    try:
        _unshare(CLONE_NEWUSER)
    except OSError as exc:
        raise OSError(exc.errno, "the process sandbox needs root or unprivileged user namespaces, and this user may "
                      f"not make one ({exc.strerror}; see user.max_user_namespaces, kernel.unprivileged_userns_clone "
                      "or the AppArmor/SELinux policy on user namespaces); use docker instead") from exc
    _write_proc("/proc/self/setgroups", "deny")
    _write_proc("/proc/self/uid_map", f"0 {uid} 1")
    _write_proc("/proc/self/gid_map", f"0 {gid} 1")


def _empty_wakeups(fd: int) -> None:
    """Empty a non-blocking wakeup pipe (signal.set_wakeup_fd's)."""
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 4096):
            pass


def _reaped() -> Iterator[tuple[int, int]]:
    """(pid, wait status) of every child that has ended, without waiting for any."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, status


def _close_all_but(keep: set[int]) -> None:
    for fd in (int(n) for n in os.listdir("/proc/self/fd")):
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _zygote(cfg: dict) -> None:
    """Stage one, on the host's interpreter (as root, or rootless in a user namespace of its own): make the cgroup
    folder, build the shared root, pivot into it, then exec the runtime's interpreter at its neutral path as the
    zygote proper (`_zygote_serve`), so that nothing it or a sandbox forked from it shows names a host path."""
    ctl = socket.socket(fileno=cfg["ctl_fd"])
    try:
        rootless = os.geteuid() != 0
        if rootless:
            _enter_user_namespace()
        _unshare(CLONE_NEWNS)
        cgroups = Cgroups.open(os.getpid())
        if cgroups is None:
            raise OSError(errno.EPERM, "no cgroup with the memory and pids controllers can be made here; the process "
                          "sandbox caps each sandbox's memory and processes with one (run as root, or in a cgroup subtree "
                          "delegated to this user, e.g. `systemd-run --user --scope -p Delegate=yes`), or use docker")
        _build_template(cfg)
        for fd in (ctl.fileno(), *cgroups.fds()):
            os.set_inheritable(fd, True)
        serve = {"ctl_fd": ctl.fileno(), "cgroups": cgroups.state(), "rootless": rootless,
                 "preload": cfg.get("preload", PRELOAD)}
        python = f"{RUNTIME_IN_ROOT}/bin/python"
        # -s -P rather than -I: the environment is built from scratch, and -I would ignore its PYTHONHASHSEED
        os.execve(python, [python, "-s", "-P", RUNNER_IN_ROOT, "zygote-serve", json.dumps(serve)], cfg["env"])
    except BaseException as exc:  # noqa: BLE001 - the host shows why the zygote could not start
        with contextlib.suppress(OSError):
            ctl.send(json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"}).encode())
        os._exit(1)


def _zygote_serve(cfg: dict) -> None:
    """The zygote: imports the task libraries once, then forks each new sandbox on request (`_spawn`), reaps the
    sandboxes' first processes (it is their subreaper) and removes their cgroups. Ends, with every sandbox it
    started, when the host closes the control socket.

    The zygote never waits for a sandbox to come up: entering the namespaces takes a child milliseconds, and the
    zygote is the one point every sandbox start passes through, so a wait there would serialize the starts of
    all rollout workers. The child answers the host on the request's own reply socket, and tells the zygote its
    first process's pid on a pipe that the zygote reads when it is ready."""
    ctl = socket.socket(fileno=cfg["ctl_fd"])
    cgroups = Cgroups.from_state(cfg["cgroups"])
    _preload(cfg.get("preload", PRELOAD))
    # Sandboxes keep the host's scheduling policy. SCHED_BATCH ran bench/rollout.py about 3% faster (sandboxes
    # beside sandboxes), but beside CPU-bound work (a vLLM engine, a training child) each sandbox wakeup then waits
    # out the other's slice: a sandbox's start and three runs took 10 to 20% longer beside two busy loops.
    _libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: a sandbox's first process is reparented to us
    _libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
    etc = {}
    for name in (*ETC_COPIED, "hosts", "nsswitch.conf"):
        with contextlib.suppress(OSError), open(f"/etc/{name}", "rb") as fh:
            etc[name] = fh.read()
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    ctl.send(json.dumps({"ready": True, "python": sys.version.split()[0]}).encode())
    live: dict[int, str] = {}  # a sandbox's first process -> its cgroup's name
    starting: dict[int, str] = {}  # the read end of a starting sandbox's pid pipe -> its cgroup's name
    forked: set[int] = set()  # the children that start sandboxes (reaped like the rest, and then forgotten)
    ended: set[int] = set()  # first processes reaped before their pid came through its pipe
    leftover: set[str] = set()  # cgroups of ended sandboxes whose last processes are still exiting
    # Empty cgroups of ended sandboxes, taken again by new ones: making and removing a memory cgroup costs the
    # kernel several milliseconds of CPU (most of it after rmdir, in a worker), about a sandbox start's worth.
    free: list[str] = []
    count = 0
    while True:
        ready, _, _ = select.select([ctl, wake_r, *starting], [], [], 0.05 if leftover else None)
        _empty_wakeups(wake_r)
        for pid, _ in _reaped():
            if pid in forked:
                forked.discard(pid)
            elif pid in live:
                leftover.add(live.pop(pid))
            else:
                ended.add(pid)
        for fd in [fd for fd in ready if fd in starting]:
            name = starting.pop(fd)
            data = os.read(fd, 64)  # one write of a few bytes, then EOF (the writer has exited or is exiting)
            os.close(fd)
            if not data.isdigit():  # the sandbox did not start: nothing runs in its cgroup
                cgroups.remove(name)
            elif int(data) in ended:
                ended.discard(int(data))
                leftover.add(name)
            else:
                live[int(data)] = name
        free += [name for name in leftover if cgroups.empty(name)]
        leftover.difference_update(free)
        if ctl not in ready:
            continue
        msg, fds, _, _ = socket.recv_fds(ctl, MAX_CONTROL_MESSAGE, 3)
        if not msg:
            for fd in fds:
                os.close(fd)
            break
        count += 1
        name = f"s{count}"
        reply = fds[2] if len(fds) == 3 else None
        try:
            request = json.loads(msg)
            if reply is None:
                raise ValueError(f"a spawn request carries the sandbox's two pipe ends and a reply socket, not "
                                 f"{len(fds)} descriptors")
            while free:  # a recycled cgroup that cannot take the new limits (charges above them) is removed
                try:
                    cgroups.create(free[-1], int(request["memory_bytes"]), int(request["pids"]))
                    name = free.pop()
                    break
                except OSError:
                    cgroups.remove(free.pop())
            else:
                cgroups.create(name, int(request["memory_bytes"]), int(request["pids"]))
            child, pid_pipe = _spawn(request, fds, cgroups, name, etc, bool(cfg["rootless"]),
                                     {ctl.fileno(), wake_r, wake_w, *starting})
            forked.add(child)
            starting[pid_pipe] = name
        except Exception as exc:  # noqa: BLE001 - one failed start is the host's to report, the zygote goes on
            cgroups.remove(name)
            if reply is not None:
                with contextlib.suppress(OSError):
                    os.write(reply, json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}).encode())
        finally:
            for fd in fds:
                os.close(fd)
    for pid in live:  # the host is gone: so are its sandboxes
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for fd, name in starting.items():  # and those still starting: their pids come through, or nothing does
        data = os.read(fd, 64)
        if data.isdigit():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(data), signal.SIGKILL)
            live[int(data)] = name
        else:
            leftover.add(name)
    for pid in live:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    for name in [*live.values(), *leftover, *free]:
        for _ in range(200):
            if cgroups.remove(name):
                break
            time.sleep(0.01)
    cgroups.close()
    os._exit(0)


def _spawn(request: dict, fds: list[int], cgroups: Cgroups, name: str, etc: dict, rootless: bool,
           zygote_fds: set[int]) -> tuple[int, int]:
    """Fork a sandbox into cgroup `name` (made, limits set): a child joins it and new namespaces, forks the
    sandbox's first process (PID 1 there, `_enter_sandbox`), answers the host on the request's reply socket (the
    first process's pid and a pidfd of it), writes the pid to a pipe for the zygote and exits; the zygote, as
    subreaper, becomes the first process's parent. Returns the child's pid and the pipe's read end."""
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        reply = socket.socket(fileno=fds[2])
        try:
            for fd in (r, *zygote_fds):
                os.close(fd)
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            cgroups.join(name)
            _unshare(SANDBOX_NAMESPACES)
            first = os.fork()
            if first == 0:
                os.close(w)
                _enter_sandbox(request, fds[:2], cgroups, name, etc, rootless)
            os.write(w, str(first).encode())  # before the host hears of it: the zygote must own its cgroup's end
            pidfd = os.pidfd_open(first)
            socket.send_fds(reply, [json.dumps({"ok": True, "pid": first}).encode()], [pidfd])
        except BaseException as exc:  # noqa: BLE001
            with contextlib.suppress(OSError):
                reply.send(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}).encode())
        finally:
            os._exit(0)
    os.close(w)
    return child, r


def _enter_sandbox(request: dict, fds: list[int], cgroups: Cgroups, name: str, etc: dict, rootless: bool) -> None:
    """PID 1 of a new sandbox: mount what is its own over the shared root, then serve the host's requests."""
    proto_in, proto_out = fds
    status = 0
    try:
        oom_fd = cgroups.oom_counter(name)
        for fd in cgroups.fds():  # the sandbox never reaches other sandboxes' cgroups
            os.close(fd)
        _close_all_but({proto_in, proto_out, oom_fd})
        uid = None if rootless else int(request["uid"])
        owner = 0 if uid is None else uid
        # Its own /proc (of its own PID namespace), moved over the zygote's so that only one is mounted.
        _mount("proc", PROC_NEW, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        if _libc.umount2(b"/proc", MNT_DETACH) != 0:
            raise OSError(ctypes.get_errno(), "umount /proc")
        _mount(PROC_NEW, "/proc", None, MS_MOVE)
        _tmpfs("/etc", 1, 64, "0755")
        for file, data in etc.items():
            with open(f"/etc/{file}", "wb") as fh:
                fh.write(data)
        user = "root" if uid is None else "sandbox"
        _write("/etc/passwd", f"root:x:0:0::/:/usr/sbin/nologin\n{user}:x:{owner}:{owner}::{WORKDIR}:/usr/sbin/nologin\n")
        _write("/etc/group", f"root:x:0:\n{user}:x:{owner}:\n")
        _mount(None, "/etc", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        disk = request["disk"]
        _mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
        _tmpfs("/dev/shm", disk["shm_mb"], disk["inodes"], "1777")
        _tmpfs(WORKDIR, disk["work_mb"], disk["inodes"], "0700", owner=owner)
        _tmpfs("/tmp", disk["tmp_mb"], disk["inodes"], "1777")
        socket.sethostname("sandbox")
        try:
            _loopback_up()
        except OSError as exc:
            sys.stderr.write(f"[runner] could not bring lo up: {exc}\n")
        _libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1):
            os.dup2(devnull, fd)
        os.close(devnull)
        cfg = {"mode": "process", "uid": uid, "rootless": rootless, "limits": request["limits"], "preload": []}
        Runner(cfg, proto_in, proto_out, oom_fd).serve()
    except OSError as exc:
        if exc.errno not in (errno.EPIPE, errno.EBADF):
            status = 70
            traceback.print_exc()
            with contextlib.suppress(OSError):
                data = json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"}).encode()
                os.write(proto_out, struct.pack(">I", len(data)) + data)
    except BaseException:  # noqa: BLE001 - never fall back into the zygote's loop
        status = 70
        traceback.print_exc()
    finally:
        os._exit(status)


def main() -> None:
    mode, cfg = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    if mode == "zygote":  # the process backend's stage one (components/sandbox/zygote.py starts it)
        _zygote(cfg)
    elif mode == "zygote-serve":
        _zygote_serve(cfg)
    else:  # container: the docker backend's image runs this
        _serve(cfg)


if __name__ == "__main__":
    main()
