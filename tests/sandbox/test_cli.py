"""`python -m flows.cli_sandbox run FILE`: exactly one JSON ExecResult on stdout, whatever the code does."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from components.sandbox.protocol import ExecResult
from tests.sandbox.conftest import assert_no_survivors

pytestmark = pytest.mark.timeout(90)

REPO = Path(__file__).resolve().parents[2]


def cli(tmp_path: Path, backend: str, code: str, *args: str) -> ExecResult:
    f = tmp_path / "prog.py"
    f.write_text(code)
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli_sandbox", "run", str(f), "--backend", backend, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, (proc.stdout, proc.stderr)
    data = json.loads(lines[0])
    assert set(data) == {"status", "exit_code", "stdout", "stderr", "truncated", "duration_s"}
    assert proc.returncode == 0, proc.stderr
    return ExecResult(**data)


def test_cli_ok(backend, tmp_path):
    res = cli(tmp_path, backend, "print(6 * 7)\n")
    assert (res.status, res.exit_code, res.stdout) == ("ok", 0, "42\n")


def test_cli_network_blocked(backend, tmp_path, token):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        res = cli(tmp_path, backend, f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n")
    assert res.status == "error" and "Error" in res.stderr


def test_cli_timeout_and_detached_child(backend, tmp_path, token):
    code = (
        "import subprocess, time\n"
        f"subprocess.Popen(['sleep', '300', '{token}'], start_new_session=True)\n"
        "time.sleep(300)\n"
    )
    res = cli(tmp_path, backend, code, "--timeout", "1")
    assert res.status == "timeout" and res.duration_s < 3
    assert_no_survivors(token)


def test_cli_memory_bomb(backend, tmp_path):
    res = cli(tmp_path, backend, "hog = []\nwhile True:\n    hog.append(bytearray(2**24))\n", "--memory-mb", "200")
    assert res.status == "oom"


def test_cli_kill_everything(backend, tmp_path):
    code = "import os\ntry:\n    os.kill(-1, 9)\nexcept ProcessLookupError:\n    pass\nprint('survived')\n"
    res = cli(tmp_path, backend, code)
    # docker: the code may signal the runner (same uid) and ends the container; process: it may signal nothing (the
    # runner is PID 1 and root: kill(-1) finds no process it may signal)
    assert res.status == "error" if backend == "docker" else res.stdout == "survived\n", res


def test_cli_stateful_flag(backend, tmp_path):
    res = cli(tmp_path, backend, "x = 5\nprint(x * 2)\n", "--stateful")
    assert res.status == "ok" and res.stdout == "10\n"


def test_cli_unavailable_backend_still_prints_json(tmp_path, monkeypatch):
    # A backend that cannot start must still yield one JSON object (status error), not a traceback.
    f = tmp_path / "p.py"
    f.write_text("print(1)")
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli_sandbox", "run", str(f), "--backend", "docker"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert data["status"] in {"ok", "error"}
    assert proc.stdout.count("\n") == 1
