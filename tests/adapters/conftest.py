"""A served task file (two numeric tasks over the CSV/SQLite/FASTA folder of tests/envs) on the real process sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.adapters.served import ServedTasks
from components.envs.coding_env import EnvConfig
from components.tasks.record import AnswerSpec, AnswerType, Task, save_tasks
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
