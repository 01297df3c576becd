"""Hostile programs: each must end with the right status and leave no process of its run behind."""

from __future__ import annotations

import os
import socket
import textwrap
from pathlib import Path

import psutil
import pytest

from components.sandbox.protocol import ExecResult, Limits
from tests.sandbox.conftest import assert_no_survivors

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]


def run(make_sandbox, token: str, code: str, **limits) -> ExecResult:
    sb = make_sandbox(Limits(**{"timeout_s": 10, "memory_mb": 512, **limits}))
    res = sb.exec(textwrap.dedent(code))
    # Checked while the sandbox is still open: the run itself must not leave anything behind.
    assert_no_survivors(token, getattr(sb, "uid", None))
    return res


def test_network_to_host_loopback_fails(make_sandbox, token):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        res = run(
            make_sandbox,
            token,
            f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
                print("CONNECTED")
            except OSError as e:
                print("BLOCKED", e)
        """,
        )
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever reached the host's listener
    assert res.status == "ok", res
    assert "BLOCKED" in res.stdout and "CONNECTED" not in res.stdout


def test_only_loopback_interface(make_sandbox, token):
    res = run(
        make_sandbox,
        token,
        """
        lines = open("/proc/net/dev").read().splitlines()[2:]
        print(sorted(l.split(":")[0].strip() for l in lines))
    """,
    )
    assert res.status == "ok", res
    assert res.stdout.strip() == "['lo']"


def test_parent_secrets_invisible(make_sandbox, token, monkeypatch):
    secret = f"s3cret-{token}"
    monkeypatch.setenv("MEDGYM_TEST_SECRET", secret)
    res = run(
        make_sandbox,
        token,
        f"""
        import os, glob
        print(dict(os.environ))
        for path in ["/proc/{os.getpid()}/environ", "/proc/1/environ", *glob.glob("/proc/[0-9]*/environ")]:
            try:
                print(path, open(path, "rb").read())
            except OSError as e:
                print(path, "unreadable", e.errno)
    """,
    )
    assert res.status == "ok", res
    assert "MEDGYM_TEST_SECRET" not in res.stdout + res.stderr
    assert secret not in res.stdout + res.stderr


def test_cannot_write_outside_workdir(make_sandbox, token, tmp_path):
    host_tmp_file = Path("/tmp") / f"{token}-host"
    host_tmp_file.write_text("host only")
    targets = [f"/etc/{token}", f"/root/{token}", str(REPO / token), f"/usr/{token}", f"/var/tmp/{token}"]
    try:
        res = run(
            make_sandbox,
            token,
            f"""
            import os
            for path in {targets!r}:
                try:
                    open(path, "w").write("x")
                    print("WROTE", path)
                except OSError as e:
                    print("DENIED", path, e.errno)
            open("inside.txt", "w").write("ok")
            open("/tmp/{token}-scratch", "w").write("ok")
            print("HOST_TMP_VISIBLE" if os.path.exists({str(host_tmp_file)!r}) else "HOST_TMP_HIDDEN")
        """,
        )
    finally:
        host_tmp_file.unlink()
    assert res.status == "ok", res
    for path in targets[:4]:  # /var/tmp may be a private tmpfs: a write there must not reach the host
        assert not Path(path).exists(), f"sandbox wrote {path} on the host"
    assert not Path(f"/var/tmp/{token}").exists()
    assert res.stdout.count("DENIED") >= 4
    assert "HOST_TMP_HIDDEN" in res.stdout
    assert not (Path("/tmp") / f"{token}-scratch").exists(), "the sandbox's /tmp is the host's"


def test_fork_bomb_hits_process_cap(make_sandbox, token):
    cap = 16
    res = run(
        make_sandbox,
        token,
        """
        import os, sys, time
        forks = 0
        try:
            while forks < 10_000:
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                forks += 1
        except OSError as e:
            print("CAPPED after", forks, type(e).__name__, e, flush=True)
            sys.exit(3)
        print("NOT CAPPED", forks)
    """,
        max_processes=cap,
        timeout_s=8,
    )
    assert res.status == "error" and res.exit_code == 3, res
    assert "CAPPED" in res.stdout and ("BlockingIOError" in res.stdout or "temporarily unavailable" in res.stdout)
    assert int(res.stdout.split("after")[1].split()[0]) < cap
    assert res.duration_s < 8  # hit the cap within the run, not merely killed at the deadline


def test_memory_bomb_is_oom(make_sandbox, token):
    res = run(
        make_sandbox,
        token,
        """
        hog = []
        while True:
            hog.append(bytearray(16 * 1024 * 1024))
    """,
        memory_mb=256,
    )
    assert res.status == "oom", res


def test_cpu_spin_times_out_near_deadline(make_sandbox, token):
    res = run(make_sandbox, token, "while True:\n    pass\n", timeout_s=1.5)
    assert res.status == "timeout" and res.exit_code is None, res
    assert 1.4 <= res.duration_s <= 2.5, res.duration_s


def test_sleep_forever_times_out(make_sandbox, token):
    res = run(make_sandbox, token, "import time\nprint('sleeping', flush=True)\ntime.sleep(10**6)\n", timeout_s=1)
    assert res.status == "timeout", res
    assert res.stdout == "sleeping\n"  # output written before the deadline is kept
    assert res.duration_s < 3


def test_huge_output_is_truncated_with_bounded_memory(make_sandbox, token):
    cap = 64 * 1024
    host = psutil.Process()
    rss_before = host.memory_info().rss
    res = run(
        make_sandbox,
        token,
        """
        import sys
        chunk = "x" * (1024 * 1024)
        for _ in range(100):
            sys.stdout.write(chunk)
        sys.stderr.write("e" * (10 * 1024 * 1024))
    """,
        max_output_bytes=cap,
        timeout_s=30,
    )
    assert res.status == "ok", res.status
    assert res.truncated is True
    assert len(res.stdout) == cap and set(res.stdout) == {"x"}
    assert len(res.stderr) == cap
    assert host.memory_info().rss - rss_before < 50 * 1024 * 1024


def test_detached_children_do_not_survive(make_sandbox, token):
    res = run(
        make_sandbox,
        token,
        f"""
        import os, subprocess, sys, time
        # setsid-detached child
        subprocess.Popen(["sleep", "300", "{token}"], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # classic double fork with setsid, exec'd so its argv carries the token
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execvp(sys.executable, [sys.executable, "-c", "import time; time.sleep(300)", "{token}"])
            os._exit(0)
        time.sleep(0.3)
        print("parent done")
    """,
    )
    assert res.status == "ok", res
    assert res.stdout == "parent done\n"


def test_killing_the_parent_is_an_error_and_host_survives(make_sandbox, token):
    sb = make_sandbox(Limits(timeout_s=10))
    res = sb.exec("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('parent killed')\n")
    # refused (another uid), except rootless, where code and runner share the namespace's one uid: the runner is
    # PID 1 there, which ignores a SIGKILL sent from inside its namespace
    if getattr(sb, "uid", 0) is not None:
        assert res.status == "error", res
    assert sb.exec("print('still serving')").stdout == "still serving\n"
    assert_no_survivors(token, getattr(sb, "uid", None))


def test_kill_everything_is_an_error_and_host_survives(make_sandbox, token):
    sb = make_sandbox(Limits(timeout_s=10))
    res = sb.exec("import os, signal\nos.kill(-1, signal.SIGKILL)\nimport time\ntime.sleep(1)\n")
    # docker: the code may signal the runner (same uid), which ends; process: the runner is PID 1 and root, so
    # kill(-1) finds no process it may signal (ESRCH)
    assert res.status == "error", res
    if sb.__class__.__name__ != "DockerSandbox":
        assert "ProcessLookupError" in res.stderr, res
    assert psutil.pid_exists(os.getpid())
    again = sb.exec("print('still serving')")
    assert again.status == "ok" and again.stdout == "still serving\n"
    assert_no_survivors(token, getattr(sb, "uid", None))
