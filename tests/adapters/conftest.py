"""A served task file (two numeric tasks over the CSV/SQLite/FASTA folder of tests/envs) on the real process sandbox."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from components.adapters.served import ServedTasks
from components.envs.coding_env import EnvConfig
from components.tasks.record import AnswerSpec, AnswerType, Task, save_tasks
from tests.conftest import ROOT
from tests.envs.conftest import PATIENTS, make_task, process_backend_unavailable, write_task_folder

FEMALE_MEAN_AGE = sum(age for _, age, sex, _ in PATIENTS if sex == "F") / sum(1 for p in PATIENTS if p[2] == "F")
MEAN_SODIUM = sum(p[3] for p in PATIENTS) / len(PATIENTS)


def served_tasks() -> list[Task]:
    spec = AnswerSpec(type=AnswerType.NUMERIC, abs_tol=0.01)
    return [
        make_task("age", answer=FEMALE_MEAN_AGE, spec=spec),
        make_task("sodium", prompt="What is the mean sodium of all patients?", answer=MEAN_SODIUM, spec=spec),
    ]


@pytest.fixture(scope="session")
def tasks_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_task_folder(tmp_path_factory.mktemp("served"))
    save_tasks(root / "tasks.jsonl", served_tasks())
    return root / "tasks.jsonl"


@pytest.fixture
def settings(tasks_file: Path) -> ServedTasks:
    reason = process_backend_unavailable()
    if reason:
        pytest.skip(reason)
    return ServedTasks(tasks=tasks_file, backend="process", env=EnvConfig(exec_timeout_s=10.0, max_turns=4))


def secrets() -> list[str]:
    """The forms of the two truths a leak would show."""
    out = []
    for truth in (FEMALE_MEAN_AGE, MEAN_SODIUM):
        out += [repr(truth), f"{truth:g}", f"{truth:.4f}", f"{truth:.3f}", f"{truth:.2f}"]
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tasks_file: Path) -> Iterator[str]:
    """`medgym env serve` on loopback, started as a user would, for the module; its base URL."""
    reason = process_backend_unavailable()
    if reason:
        pytest.skip(reason)
    pytest.importorskip("openenv.core.env_server.http_server", reason="the openenv extra (make setup) is not installed")
    port = free_port()
    log = tasks_file.parent / f"server-{port}.log"
    cmd = [sys.executable, "-c", "from flows.cli import main; main()", "env", "serve", "--tasks", str(tasks_file),
           "--port", str(port), "--backend", "process", "--max-turns", "4", "--exec-timeout", "10", "--max-sessions", "3"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, f"the server exited:\n{log.read_text()[-3000:]}"
            try:
                if requests.get(f"{url}/health", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, f"the server did not answer:\n{log.read_text()[-3000:]}"
            time.sleep(0.5)
        yield url
        assert proc.poll() is None, f"the server died during the tests:\n{log.read_text()[-3000:]}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
