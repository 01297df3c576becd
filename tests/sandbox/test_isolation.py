"""What a policy trained against rewards would look for: answers on the host, the project's own code, notes left for
the next episode, links that turn an upload into a write outside, kernel interfaces that reach past the sandbox.
Every test runs against each backend (see conftest.py)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest

from components.sandbox.protocol import Limits
from components.sandbox.runner import _DENY
from components.sandbox.runtime import locked_versions

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]


def run(sb, code: str, **kw):  # noqa: ANN001, ANN003 - any Sandbox
    return sb.exec(textwrap.dedent(code), **kw)


def test_answers_beside_the_checkout_are_invisible(make_sandbox):
    # A world-readable folder next to the checkout, as another project or a data copy would be (in /tmp where this
    # user may not write there: the rootless run).
    beside = REPO.parent if os.access(REPO.parent, os.W_OK) else Path(tempfile.gettempdir())
    planted = beside / f"medgym-answers-{uuid.uuid4().hex[:8]}"
    planted.mkdir(mode=0o755)
    (planted / "tasks.jsonl").write_text(json.dumps({"task_id": "t", "answer": "42.195"}) + "\n")
    (planted / "tasks.jsonl").chmod(0o644)
    try:
        res = run(make_sandbox(), f"""
            import os
            found = []
            for root, dirs, files in os.walk("/", onerror=lambda e: None):
                dirs[:] = [d for d in dirs if os.path.join(root, d) not in ("/proc", "/sys")]
                found += [os.path.join(root, f) for f in files if f == "tasks.jsonl" or "42.195" in f]
            print("FOUND", found)
            print("PLANTED", os.path.exists({str(planted)!r}), os.path.exists({str(REPO / "data")!r}))
        """, timeout_s=60)
    finally:
        shutil.rmtree(planted)
    assert res.status == "ok", res
    assert "FOUND []" in res.stdout
    assert "PLANTED False False" in res.stdout


def test_the_project_package_cannot_be_imported(make_sandbox):
    res = run(make_sandbox(), """
        import importlib.util, sys
        print([m for m in ("components", "flows", "medgym") if importlib.util.find_spec(m)])
        print(any("site-packages" in p and ".venv" in p for p in sys.path))
    """)
    assert res.status == "ok", res
    assert res.stdout == "[]\nFalse\n"


def test_both_backends_run_the_locked_library_versions(make_sandbox):
    res = run(make_sandbox(), """
        import importlib.metadata as md, json
        print(json.dumps({d.metadata["Name"].lower().replace("_", "-"): d.version for d in md.distributions()}))
    """)
    assert res.status == "ok", res
    installed = json.loads(res.stdout)
    assert installed == locked_versions()  # exactly the lock: nothing missing, nothing extra


@pytest.mark.skipif(platform.machine() not in _DENY, reason=f"no syscall table for {platform.machine()}")
def test_kernel_interfaces_past_the_sandbox_are_refused(make_sandbox):
    nr = _DENY[platform.machine()]
    res = run(make_sandbox(), f"""
        import ctypes, errno, os
        libc = ctypes.CDLL(None, use_errno=True)
        def call(n, *args):
            ctypes.set_errno(0)
            rc = libc.syscall(n, *args)
            return "refused" if rc == -1 and ctypes.get_errno() in (errno.EPERM, errno.ENOSYS) else f"rc={{rc}}"
        buf = ctypes.create_string_buffer(256)
        print("add_key", call({nr['add_key']}, b"user", b"medgym", b"note-for-next-episode", 6, ctypes.c_int(-4)))
        print("keyctl", call({nr['keyctl']}, 0, ctypes.c_int(-4), 0))
        print("request_key", call({nr['request_key']}, b"user", b"medgym", None, 0))
        print("unshare", call({nr['unshare']}, 0x10000000))
        print("setns", call({nr['setns']}, 0, 0))
        print("mount", call({nr['mount']}, b"none", b"/tmp", b"tmpfs", 0, None))
        print("io_uring_setup", call({nr['io_uring_setup']}, 8, buf))
        print("bpf", call({nr['bpf']}, 0, buf, 64))
        print("perf_event_open", call({nr['perf_event_open']}, buf, 0, -1, -1, 0))
        print("ptrace", call({nr['ptrace']}, 16, 1, 0, 0))
        # clone with CLONE_NEWUSER: a namespace with every capability inside, which is where escapes start
        print("clone_newuser", call({56 if platform.machine() == "x86_64" else 220}, 0x10000000 | 17, 0, 0, 0, 0))
        import threading, subprocess  # ordinary threads and processes still work
        t = threading.Thread(target=lambda: None); t.start(); t.join()
        print("sub", subprocess.run(["python", "-c", "print(7)"], capture_output=True, text=True).stdout.strip())
    """.replace("platform.machine()", repr(platform.machine())))
    assert res.status == "ok", res
    lines = dict(line.split(" ", 1) for line in res.stdout.splitlines())
    assert lines.pop("sub") == "7"
    assert lines == dict.fromkeys(lines, "refused") and len(lines) == 11, res.stdout


@pytest.mark.skipif(platform.machine() not in _DENY, reason=f"no syscall table for {platform.machine()}")
def test_a_key_or_note_left_by_one_sandbox_is_not_seen_by_the_next(make_sandbox):
    # Keys are kept per uid and outlive the process; uids are reused, so a key would reach a later episode.
    add_key = _DENY[platform.machine()]["add_key"]
    first = make_sandbox()
    leave = run(first, f"""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall({add_key}, b"user", b"medgym-note", b"answer is 7", 11, ctypes.c_int(-5))  # the user keyring
        open("/tmp/note", "w").write("answer is 7")
        open("/dev/shm/note", "w").write("answer is 7")
    """)
    assert leave.status == "ok", leave
    first.close()
    res = run(make_sandbox(), """
        import os
        print(sorted(os.listdir("/tmp")), sorted(os.listdir("/dev/shm")), sorted(os.listdir(".")))
        print(open("/proc/keys").read().strip() if os.path.exists("/proc/keys") else "")
    """)
    assert res.status == "ok", res
    listing, keys = res.stdout.split("\n", 1)
    assert listing == "[] [] []"
    assert "medgym-note" not in keys


def test_private_devpts_and_proc(make_sandbox):
    res = run(make_sandbox(), """
        import os, pty
        before = sorted(os.listdir("/dev/pts"))
        m, s = pty.openpty()
        print(before, os.ttyname(s))
        print(sorted(os.listdir("/dev")))
    """)
    assert res.status == "ok", res
    pts, dev = res.stdout.splitlines()
    assert pts.startswith("['ptmx']") and "/dev/pts/0" in pts  # a devpts instance of its own: no host pty
    assert "sda" not in dev and "vda" not in dev and "kmsg" not in dev and "mem" not in dev.split("'")


def test_working_dir_is_capped_in_bytes_and_inodes(make_sandbox):
    before = shutil.disk_usage("/").free
    sb = make_sandbox(Limits(timeout_s=30, memory_mb=512, disk_mb=32, max_files=300))
    res = run(sb, """
        import os
        written = 0
        try:
            with open("big", "wb") as f:
                while written < 960 * 2**20:
                    f.write(b"x" * 2**20); written += 2**20
        except OSError as e:
            print("BYTES", written // 2**20, e.errno)
        os.remove("big")
        n = 0
        try:
            while n < 150_000:
                open(f"f{n}", "w").close(); n += 1
        except OSError as e:
            print("INODES", n, e.errno)
    """, timeout_s=30)
    after = shutil.disk_usage("/").free
    assert res.status == "ok", res
    out = dict(line.split(" ", 1) for line in res.stdout.splitlines())
    mb, err = map(int, out["BYTES"].split())
    assert mb <= 32 and err == 28  # ENOSPC at the cap
    files, err = map(int, out["INODES"].split())
    assert files <= 300 and err == 28
    assert abs(after - before) < 64 * 2**20  # nothing of it reached the host's disk


def test_uploads_never_follow_a_planted_link(make_sandbox, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("host file")
    src = tmp_path / "payload.csv"
    src.write_text("a,b\n1,2\n")
    sb = make_sandbox()
    planted = run(sb, f"""
        import os
        os.symlink({str(outside / "victim.txt")!r}, "data.csv")
        os.symlink({str(outside)!r}, "ctx")
        os.symlink("/tmp", "tmpdir")
        print("planted")
    """)
    assert planted.stdout == "planted\n", planted
    for dest in ("ctx/new.csv", "tmpdir/new.csv"):
        with pytest.raises(OSError, match="link"):
            sb.upload_file(src, dest)
    sb.upload_file(src, "data.csv")  # the link itself is replaced by the file; its target is untouched
    assert (outside / "victim.txt").read_text() == "host file"
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
    res = run(sb, "import os\nprint(os.path.islink('data.csv'), open('data.csv').read().splitlines()[0])")
    assert res.stdout == "False a,b\n", res


def test_a_planted_read_only_file_is_replaced_by_the_upload(make_sandbox, tmp_path):
    src = tmp_path / "ctx.csv"
    src.write_text("real data\n")
    sb = make_sandbox()
    run(sb, "import os\nopen('ctx.csv','w').write('forged data\\n')\nos.chmod('ctx.csv', 0o444)\nos.makedirs('d')\n"
            "open('d/f.csv','w').write('forged')\nos.chmod('d/f.csv', 0)")
    sb.upload_file(src, "ctx.csv")
    sb.upload_file(src, "d/f.csv")
    res = run(sb, "print(open('ctx.csv').read(), end='')\nprint(open('d/f.csv').read(), end='')")
    assert res.stdout == "real data\nreal data\n", res
