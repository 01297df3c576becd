"""Holes hostile programs found through the sandbox API (issue 24), each closed in both backends.

- memory is capped per sandbox, not per process, and the sandbox's tmpfs counts against it;
- concurrent sandboxes cannot talk through inotify/fanotify on folders they all see;
- sockets of families other than AF_UNIX and AF_INET/AF_INET6 (AF_VSOCK first) cannot be made;
- nothing a sandboxed process reads about itself names the host's checkout or interpreter.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from components.sandbox.protocol import Limits
from tests.sandbox.conftest import require_backend

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]

FORK_SIX = """
import os, sys, time
r, w = os.pipe()
kids = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        os.close(r)
        held = b"x" * (110 * 1024 * 1024)  # touched: every page is charged
        os.write(w, b"1")
        time.sleep(3)
        os._exit(0)
    kids.append(pid)
os.close(w)
killed = sum(1 for pid in kids if os.waitpid(pid, 0)[1] != 0)
held = len(os.read(r, 64))
print(f"held={held} killed={killed}")
sys.exit(1 if killed else 0)
"""


def test_memory_is_capped_per_sandbox_not_per_process(make_sandbox):
    # six children of 110 MB each fit a per-process cap of 128 MB; together they are five times the sandbox's budget
    res = make_sandbox(Limits(memory_mb=128, timeout_s=30)).exec(FORK_SIX)
    assert res.status == "oom", res
    assert "killed=0" not in res.stdout, res


TMPFS_THEN_ALLOCATE = """
import sys
for i in range(3):  # files of 60 MB: under the per-file cap
    with open(f"/tmp/fill{i}", "wb") as fh:
        for _ in range(60):
            fh.write(b"x" * (1024 * 1024))
print("tmp written", flush=True)
held = b"y" * (100 * 1024 * 1024)
print("allocated")
"""


def test_tmpfs_counts_against_the_sandbox_memory(make_sandbox):
    # 180 MB in /tmp (under its 256 MB size cap) and then 100 MB in the process (under its own cap) are more than
    # the sandbox's 128 MB and the runner's share together
    res = make_sandbox(Limits(memory_mb=128, timeout_s=30)).exec(TMPFS_THEN_ALLOCATE)
    assert res.status == "oom", res
    assert "allocated" not in res.stdout, res


NOTIFY = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
for name, args in (("inotify_init1", (0,)), ("inotify_init", ()), ("fanotify_init", (0, 0))):
    fn = getattr(libc, name, None)
    if fn is None:
        continue
    fd = fn(*args)
    print(name, fd, errno.errorcode.get(ctypes.get_errno(), "-") if fd < 0 else "opened")
"""


def test_file_event_watches_are_refused(make_sandbox):
    res = make_sandbox().exec(NOTIFY)
    assert res.status == "ok", res
    lines = res.stdout.splitlines()
    assert any(line.startswith("inotify_init1 ") for line in lines), res
    for line in lines:
        assert line.endswith(" -1 EPERM"), res


SOCKETS = """
import socket
for family in ("AF_VSOCK", "AF_NETLINK", "AF_PACKET", "AF_ALG", "AF_BLUETOOTH", "AF_CAN", "AF_RDS", "AF_TIPC"):
    value = getattr(socket, family, None)
    if value is None:
        continue
    kind = {"AF_NETLINK": socket.SOCK_RAW, "AF_PACKET": socket.SOCK_RAW, "AF_CAN": socket.SOCK_RAW,
            "AF_VSOCK": socket.SOCK_STREAM}.get(family, socket.SOCK_SEQPACKET)
    try:
        socket.socket(value, kind).close()
        print(family, "made")
    except OSError as exc:
        print(family, exc.errno)
for family in ("AF_UNIX", "AF_INET", "AF_INET6"):
    socket.socket(getattr(socket, family), socket.SOCK_STREAM).close()
    print(family, "made")
a, b = socket.socketpair()
a.close(), b.close()
print("socketpair made")
"""


def test_only_unix_and_inet_sockets_can_be_made(make_sandbox):
    import errno

    res = make_sandbox().exec(SOCKETS)
    assert res.status == "ok", res
    outcome = dict(line.rsplit(" ", 1) for line in res.stdout.splitlines())
    assert outcome.pop("AF_VSOCK") == str(errno.EAFNOSUPPORT), res
    assert outcome.pop("AF_UNIX") == outcome.pop("AF_INET") == outcome.pop("AF_INET6") == "made", res
    assert outcome.pop("socketpair") == "made", res
    assert outcome and all(v == str(errno.EAFNOSUPPORT) for v in outcome.values()), res


SELF_VIEW = """
import os, sys
print(open("/proc/1/cmdline").read().replace("\\0", " "))
print(open("/proc/self/cmdline").read().replace("\\0", " "))
print(os.environ)
print(sys.executable, sys.prefix, sys.base_prefix, sys.exec_prefix, sys.path)
import numpy
print(numpy.__file__, os.getcwd())
print(os.uname().nodename)
for line in open("/proc/self/mountinfo"):
    print("MOUNT", line.split()[4])
"""


def test_nothing_a_sandbox_reads_about_itself_names_a_host_path():
    require_backend("process")
    from components.sandbox.process import ProcessSandbox
    from components.sandbox.runtime import ensure_runtime

    rt = ensure_runtime()
    with ProcessSandbox() as sb:
        res = sb.exec(SELF_VIEW)
    assert res.status == "ok", res
    host_paths = {str(REPO), str(rt.env), str(rt.base_prefix), str(Path(sys.executable).parent)}
    for path in host_paths:
        assert path not in res.stdout, (path, res.stdout)
    import socket

    assert socket.gethostname() not in res.stdout.split(), res.stdout
    mounts = [line.split()[1] for line in res.stdout.splitlines() if line.startswith("MOUNT ")]
    assert f"/opt/medgym/env/lib/python{rt.python_version}/site-packages" in mounts, mounts
