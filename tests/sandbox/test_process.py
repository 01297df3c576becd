"""Process-backend specifics: per-instance uids, the host-side guards, the factory."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from components.sandbox.factory import docker_backend_available, open_sandbox
from components.sandbox.protocol import RUNNER_OVERHEAD_MB, Limits
from tests.sandbox.conftest import require_backend

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def process_sandbox():
    require_backend("process")
    from components.sandbox.process import ProcessSandbox

    opened = []

    def make(**kw):
        sb = ProcessSandbox(**kw)
        opened.append(sb)
        return sb

    yield make
    for sb in opened:
        sb.close()


def test_concurrent_sandboxes_get_distinct_unprivileged_uids(process_sandbox):
    a, b = process_sandbox(), process_sandbox()
    ua = a.exec("import os\nprint(os.getuid(), os.getgid(), os.getgroups())").stdout.split(maxsplit=2)
    ub = b.exec("import os\nprint(os.getuid())").stdout.split()
    assert ua[0] != ub[0] and int(ua[0]) != 0 and int(ua[1]) != 0 and ua[2].strip() == "[]"


def test_sandbox_processes_keep_the_hosts_scheduling_policy(process_sandbox):
    # not SCHED_BATCH: beside CPU-bound work a batch sandbox's every wakeup waits out a slice (runner.py)
    res = process_sandbox().exec("import os\nprint(os.sched_getscheduler(0), os.sched_getscheduler(1))")
    assert res.stdout.split() == [str(os.SCHED_OTHER)] * 2  # the agent's process and the sandbox's runner
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


def test_workdir_is_cwd_and_private_tmp(process_sandbox):
    sb = process_sandbox()
    res = sb.exec("import os\nprint(os.getcwd())\nprint(os.listdir('/tmp'))")
    cwd, tmp_listing = res.stdout.splitlines()
    assert cwd == sb.workdir == "/work"
    assert ast.literal_eval(tmp_listing) == []  # a tmpfs of its own, not the host's /tmp


def test_own_pid_namespace(process_sandbox):
    res = process_sandbox().exec(
        "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()), os.getpid())"
    )
    pids, me = res.stdout.rsplit(" ", 1)
    # only the runner (PID 1: it serves and reaps) and the code itself; nothing of the host
    assert ast.literal_eval(pids) == [1, int(me)], res


def test_upload_outside_workdir_is_refused(process_sandbox, tmp_path):
    src = tmp_path / "f.txt"
    src.write_text("x")
    sb = process_sandbox()
    with pytest.raises(ValueError, match="outside the sandbox working dir"):
        sb.upload_file(src, "../escape.txt")
    with pytest.raises(ValueError, match="outside the sandbox working dir"):
        sb.upload_file(src, "/etc/escape.txt")


def test_close_ends_the_sandbox_and_empties_its_cgroup_for_the_next(process_sandbox):
    sb = process_sandbox(limits=Limits(memory_mb=64))
    sb.exec("open('f', 'w').write('x' * 1000)")
    pid = sb._pid
    cgroups = sandbox_cgroups(pid)
    assert cgroups and all(c.is_dir() for c in cgroups), cgroups
    limit = next(c / name for c in cgroups for name in ("memory.limit_in_bytes", "memory.max") if (c / name).exists())
    sb.close()
    assert gone(pid)
    deadline = time.monotonic() + 5
    while any((c / "cgroup.procs").read_text().strip() for c in cgroups) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any((c / "cgroup.procs").read_text().strip() for c in cgroups)
    # an ended sandbox's empty cgroup is taken by the next, with the next one's limits
    time.sleep(0.2)
    again = process_sandbox(limits=Limits(memory_mb=128))
    assert sandbox_cgroups(again._pid) == cgroups
    assert int(limit.read_text()) == (128 + 96) * 1024 * 1024


def test_sandboxes_started_at_once_from_many_threads_are_apart_and_leave_no_cgroup(process_sandbox):
    """The zygote forks and goes on while each sandbox enters its namespaces, and learns each first process's pid
    later: every start gets its own answer, its own cgroup, and every cgroup empties once its sandbox closes."""
    from concurrent.futures import ThreadPoolExecutor

    n = 8
    barrier = threading.Barrier(n)

    def start(i: int):
        barrier.wait()
        sb = process_sandbox(limits=Limits(memory_mb=64 + i))
        return sb, sb.exec("import os\nprint(os.getpid())").stdout.strip()

    with ThreadPoolExecutor(n) as pool:
        started = list(pool.map(start, range(n)))
    assert [out for _, out in started] == ["2"] * n  # each in a PID namespace of its own, the code PID 2 there
    pids = {sb._pid for sb, _ in started}
    folders = [sandbox_cgroups(sb._pid) for sb, _ in started]
    assert len(pids) == n and len({tuple(f) for f in folders}) == n
    for (sb, _), own in zip(started, folders, strict=True):  # each cgroup holds its own sandbox's limit
        limit = next(c / x for c in own for x in ("memory.limit_in_bytes", "memory.max") if (c / x).exists())
        assert int(limit.read_text()) == (sb.limits.memory_mb + RUNNER_OVERHEAD_MB) * 1024 * 1024
    for sb, _ in started:
        sb.close()
    deadline = time.monotonic() + 10
    while any((c / "cgroup.procs").read_text().strip() for f in folders for c in f) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any((c / "cgroup.procs").read_text().strip() for f in folders for c in f)
    assert all(gone(pid) for pid in pids)


def test_a_start_the_zygote_refuses_is_answered_and_the_next_one_runs(process_sandbox):
    require_backend("process")
    from components.sandbox.zygote import ZygoteError, shared_zygote

    r, w = os.pipe()
    try:
        with pytest.raises(ZygoteError, match="could not start a sandbox: ValueError"):
            shared_zygote().spawn((r, w), {"memory_bytes": "not a number", "pids": 10})
    finally:
        os.close(r)
        os.close(w)
    assert process_sandbox().exec("print(1 + 1)").stdout == "2\n"


def test_a_killed_owner_leaves_no_sandbox_no_zygote_and_no_cgroup():
    require_backend("process")
    script = (
        "import os, sys\n"
        "from components.sandbox.process import ProcessSandbox\n"
        "sb = ProcessSandbox()\n"
        "print(sb._pid, sb._zygote._proc.pid, flush=True)\n"
        "sys.stdin.read()\n"
        "os._exit(0)\n"  # dies without close(): the zygote sees its socket close and ends its sandboxes
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=REPO)
    sandbox, zygote = (int(x) for x in proc.stdout.readline().split())
    folders = sandbox_cgroups(sandbox)
    assert folders
    proc.stdin.close()
    proc.wait(timeout=60)
    deadline = time.monotonic() + 10
    while (psutil.pid_exists(sandbox) or psutil.pid_exists(zygote)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not psutil.pid_exists(sandbox) and not psutil.pid_exists(zygote)
    # the sandbox's cgroup and the zygote's own folder above it
    assert not any(f.exists() or f.parent.exists() for f in folders), folders


def test_context_manager_closes(process_sandbox):
    from components.sandbox.process import ProcessSandbox

    with ProcessSandbox() as sb:
        assert sb.exec("print(2)").stdout == "2\n"
    assert not sb.is_alive()


def test_memory_limit_applies_to_subprocesses(process_sandbox):
    sb = process_sandbox(limits=Limits(memory_mb=256))
    res = sb.exec(
        "import subprocess, sys\n"
        "r = subprocess.run([sys.executable, '-c', 'x = bytearray(2 * 1024**3)'], capture_output=True, text=True)\n"
        "sys.stderr.write(r.stderr)\nsys.exit(r.returncode)\n"
    )
    assert res.status == "oom", res


def test_factory_process_and_auto(monkeypatch):
    require_backend("process")
    with open_sandbox("process", Limits(timeout_s=5)) as sb:
        assert type(sb).__name__ == "ProcessSandbox"
        assert sb.exec("print(3)").stdout == "3\n"
    auto = open_sandbox("auto")
    try:
        expected = "DockerSandbox" if docker_backend_available() else "ProcessSandbox"
        assert type(auto).__name__ == expected
    finally:
        auto.close()


def test_factory_rejects_unknown_backend():
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        open_sandbox("vm")  # type: ignore[arg-type]


def test_runner_environment_has_no_host_secret(process_sandbox, monkeypatch):
    monkeypatch.setenv("MEDGYM_RUNNER_SECRET", "xyz-should-not-leak")
    sb = process_sandbox()
    sb.exec("import time\nprint('x')")
    zygote = psutil.Process(sb._zygote._proc.pid)
    tree = [zygote, *zygote.children(recursive=True)]
    assert psutil.Process(sb._pid) in tree
    for p in tree:
        assert "MEDGYM_RUNNER_SECRET" not in p.environ()
    assert os.environ["MEDGYM_RUNNER_SECRET"] == "xyz-should-not-leak"


def test_stateful_kernel_is_frozen_between_execs(process_sandbox):
    sb = process_sandbox(stateful=True)
    sb.exec(
        "import threading, time\nticks = [0]\n"
        "def spin():\n    while True:\n        ticks[0] += 1\n        time.sleep(0.01)\n"
        "threading.Thread(target=spin, daemon=True).start()\ntime.sleep(0.1)\n"
    )
    before = int(sb.exec("print(ticks[0])").stdout)
    time.sleep(0.5)
    after = int(sb.exec("print(ticks[0])").stdout)
    assert after - before < 10  # ~50 ticks had it kept running while the sandbox was idle


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def sandbox_cgroups(pid: int) -> list[Path]:
    """The cgroup folders (memory and pids, or the unified one) a sandbox's first process is in, seen from the host."""
    folders = []
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "medgym-z" not in path:
            continue
        for name in controllers.split(",") if controllers else ["unified"]:
            if name in ("memory", "pids"):
                folders.append(Path(f"/sys/fs/cgroup/{name}{path}"))
            elif name == "unified" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
                folders.append(Path(f"/sys/fs/cgroup{path}"))
    return folders


def test_the_hosts_package_folders_are_empty_inside(process_sandbox):
    """The runtime's libraries only: the interpreter's own site-packages and the distribution's package folders
    are hidden wherever the sandbox's root shows them (at their path and under the interpreter's neutral prefix)."""
    from components.sandbox.runtime import ensure_runtime, host_site_dirs

    rt = ensure_runtime()
    folders = [*host_site_dirs(rt), f"/opt/medgym/python/lib/python{rt.python_version}/site-packages"]
    code = f"import os, json\nprint(json.dumps({{p: os.listdir(p) for p in {folders!r} if os.path.isdir(p)}}))"
    res = process_sandbox().exec(code)
    assert res.status == "ok", res
    seen = ast.literal_eval(res.stdout.replace("null", "None"))
    assert seen and all(v == [] for v in seen.values()), seen
