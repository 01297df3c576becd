"""Docker-specific behaviour: container hardening, the warm pool, labels and the orphan reaper.

Skips when no engine answers, unless MEDGYM_REQUIRE_DOCKER=1 (then that is a failure).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from components.sandbox.protocol import Limits
from tests.sandbox.conftest import require_backend

pytestmark = [pytest.mark.docker, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]
LIMITS = Limits(timeout_s=10, memory_mb=256, max_processes=32)


@pytest.fixture(scope="module")
def client():
    require_backend("docker")
    from components.sandbox.docker_container import docker_client

    return docker_client()


def labelled(client, **labels: str) -> list[dict]:
    filters = ["medgym.sandbox=1", *(f"{k}={v}" for k, v in labels.items())]
    return client.api.containers(all=True, filters={"label": filters})


def test_container_is_locked_down(client):
    from components.sandbox.docker import DockerSandbox

    with DockerSandbox(LIMITS) as sb:
        (c,) = labelled(client, **{"medgym.owner_pid": str(os.getpid())})
        info = client.api.inspect_container(c["Id"])
        host = info["HostConfig"]
        assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
        assert host["LogConfig"]["Type"] == "none"  # endless output cannot fill the host's disk through logs
        assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
        assert host["PidsLimit"] >= LIMITS.max_processes and host["Memory"] >= LIMITS.memory_mb * 2**20
        assert host["Memory"] == host["MemorySwap"]
        assert {u["Name"] for u in host["Ulimits"]} >= {"nofile", "fsize"}
        assert info["Config"]["User"] == "1000:1000"
        res = sb.exec(textwrap.dedent("""
            import os, resource
            status = open("/proc/self/status").read()
            print(os.getuid(), os.getgid())
            print([l.split()[1] for l in status.splitlines() if l.startswith(("CapEff", "CapPrm", "CapBnd"))])
            print([l.split()[1] for l in status.splitlines() if l.startswith("NoNewPrivs")])
            print(resource.getrlimit(resource.RLIMIT_NOFILE))
            try:
                open("/opt/medgym/x", "w")
            except OSError as e:
                print("RO", e.errno)
        """))
        assert res.status == "ok", res
        lines = res.stdout.splitlines()
        assert lines[0] == "1000 1000"
        assert lines[1] == "['0000000000000000', '0000000000000000', '0000000000000000']"
        assert lines[2] == "['1']"
        assert lines[3] == f"({LIMITS.max_open_files}, {LIMITS.max_open_files})"
        assert lines[4] == "RO 30"  # EROFS


def test_stateful_keeps_variables_and_stateless_does_not(client):
    from components.sandbox.docker import DockerSandbox

    with DockerSandbox(LIMITS, stateful=True) as sb:
        assert sb.exec("x = 41").status == "ok"
        assert sb.exec("x += 1\nprint(x)").stdout == "42\n"
        assert sb.exec("import time\ntime.sleep(5)", timeout_s=0.5).status == "timeout"
        lost = sb.exec("print('x' in globals())")
        assert lost.stdout == "False\n" and "state was reset" in lost.stderr
    with DockerSandbox(LIMITS) as sb:
        sb.exec("x = 41")
        res = sb.exec("print(x)")
        assert res.status == "error" and "NameError" in res.stderr


def test_uploads_land_in_workdir(client, tmp_path):
    from components.sandbox.docker import DockerSandbox

    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "sub" / "b.csv").write_text("a,b\n1,2\n")
    (tmp_path / "one.txt").write_bytes(b"\x00\xffbinary")
    with DockerSandbox(LIMITS) as sb:
        sb.upload_file(tmp_path / "one.txt", "in/one.txt")
        sb.upload_dir(tmp_path / "d", "data")
        res = sb.exec("import pandas as pd\nprint(open('in/one.txt','rb').read())\n"
                      "print(pd.read_csv('data/sub/b.csv').b.sum())")
        assert res.stdout == "b'\\x00\\xffbinary'\n2\n", res
        with pytest.raises(ValueError, match="outside"):
            sb.upload_file(tmp_path / "one.txt", "../etc/passwd")


def test_pool_hands_out_fresh_containers_only(client):
    from components.sandbox.docker import DockerPool, DockerSandbox

    with DockerPool(LIMITS, size=1, client=client) as pool:
        assert pool.wait_ready(60)
        first = DockerSandbox(LIMITS, pool=pool)
        first_id = first._box.id
        first.exec("open('leftover.txt','w').write('x'); open('/tmp/t','w').write('x')")
        first.close()
        assert first.is_alive() is False
        second = DockerSandbox(LIMITS, pool=pool)
        assert second._box.id != first_id  # a used container is removed, never handed on
        res = second.exec("import os\nprint(os.listdir('.'), os.listdir('/tmp'))")
        assert res.stdout == "[] []\n", res
        second.close()
        assert pool.wait_ready(60)  # refilled in the background
        deadline = time.monotonic() + 30
        while client.api.containers(all=True, filters={"id": first_id}) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert client.api.containers(all=True, filters={"id": first_id}) == []
        with pytest.raises(ValueError, match="pool serves"):
            DockerSandbox(Limits(memory_mb=999), pool=pool)
    time.sleep(0.5)
    assert labelled(client, **{"medgym.owner_pid": str(os.getpid())}) == []


def test_sigkilled_owner_leaves_nothing_behind(client):
    from components.sandbox.docker import reap_orphans

    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import sys, time
            from components.sandbox.docker import DockerPool, DockerSandbox
            from components.sandbox.protocol import Limits
            pool = DockerPool(Limits(), size=1).start()
            sb = DockerSandbox(Limits(), pool=pool)
            print(sb.exec("print('up')").stdout, flush=True)
            time.sleep(600)
        """)],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout.readline() == "up\n"
        mine = {"medgym.owner_pid": str(child.pid)}
        deadline = time.monotonic() + 30
        while len(labelled(client, **mine)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(labelled(client, **mine)) == 2  # the sandbox's and the pool's idle one
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    # Self-destruct: the daemon closes the runners' stdin, they exit and auto-remove takes the containers.
    deadline = time.monotonic() + 20
    while labelled(client, **mine) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert labelled(client, **mine) == []
    # The reaper removes what the self-destruct cannot reach, e.g. a container never started.
    from components.sandbox.docker import DEFAULT_IMAGE

    orphan = client.api.create_container(DEFAULT_IMAGE, labels={
        "medgym.sandbox": "1", "medgym.owner_pid": str(child.pid), "medgym.owner_start": "1",
        "medgym.owner_host": os.uname().nodename})
    assert reap_orphans(client) >= 1
    assert labelled(client, **mine) == []
    assert not [c for c in client.api.containers(all=True) if c["Id"] == orphan["Id"]]


LEAVE_TRACES = """
import ctypes, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
for d in ("/work/locked", "/tmp/locked", "/dev/shm/locked"):
    os.makedirs(d); os.chmod(d, 0)
open("/work/ctx.csv", "w").write("forged"); os.chmod("/work/ctx.csv", 0o444)
IPC_CREAT = 0o1000
print("shm", libc.shmget(0x4D47, 4096, IPC_CREAT | 0o666) >= 0)
print("msg", libc.msgget(0x4D47, IPC_CREAT | 0o666) >= 0)
print("mq", libc.mq_open(b"/medgym", os.O_CREAT | os.O_RDWR, 0o666, None) >= 0 if hasattr(libc, "mq_open") else False)
subprocess.Popen(["sleep", "300"], start_new_session=True)
"""

SEE_TRACES = """
import os
print(sorted(os.listdir("/work")), sorted(os.listdir("/tmp")), sorted(os.listdir("/dev/shm")))
print(open("/proc/sysvipc/shm").read().count("\\n") - 1, open("/proc/sysvipc/msg").read().count("\\n") - 1)
print(sorted(os.listdir("/dev/mqueue")) if os.path.isdir("/dev/mqueue") else [])
print(sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and open(f"/proc/{p}/cmdline").read().startswith("sleep")))
"""


def test_pooled_next_tenant_sees_nothing_of_the_last(client):
    from components.sandbox.docker import DockerPool, DockerSandbox

    with DockerPool(LIMITS, size=1, client=client) as pool:
        assert pool.wait_ready(60)
        with DockerSandbox(LIMITS, pool=pool) as first:
            left = first.exec(LEAVE_TRACES)
            assert left.status == "ok" and "shm True" in left.stdout and "msg True" in left.stdout, left
        assert pool.wait_ready(60)
        with DockerSandbox(LIMITS, pool=pool) as second:
            res = second.exec(SEE_TRACES)
    assert res.status == "ok", res
    assert res.stdout.splitlines() == ["[] [] []", "0 0", "[]", "[]"], res.stdout
