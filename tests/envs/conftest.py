"""Fixtures for the coding environment: a tiny task folder (CSV, SQLite, FASTA) and envs on the real process sandbox."""

from __future__ import annotations

import csv
import os
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from components.envs.coding_env import CodingEnv, EnvConfig, make_sandbox_factory
from components.tasks.record import AnswerSpec, AnswerType, ContextFile, Domain, Task

PATIENTS = [  # patient_id, age, sex, sodium
    (1, 34, "F", 138.0),
    (2, 71, "M", 141.5),
    (3, 58, "F", 135.0),
    (4, 45, "M", 144.0),
    (5, 29, "F", 139.5),
    (6, 83, "F", 131.0),
    (7, 62, "M", 137.0),
    (8, 50, "F", 142.0),
    (9, 77, "M", 136.5),
    (10, 41, "F", 140.0),
]
DRUGS = ["aspirin ec 325 mg", "Aspirin 81 mg chewable", "acetaminophen 500 mg", "heparin sodium", "metoprolol tartrate"]
PRESCRIPTIONS = [(i % 7 + 1, DRUGS[i % len(DRUGS)], f"{(i % 4 + 1) * 25}") for i in range(30)]
FASTA = ">seqA human test\nACGTACGTAC\nGGCC\n>seqB\nTTTT\n>brca1_fragment\nACGTTGCA\n"


def process_backend_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "the process sandbox backend needs root (namespaces, uid switch)"
    if shutil.which("unshare") is None:
        return "the process sandbox backend needs util-linux `unshare`"
    return None


@pytest.fixture(scope="session")
def task_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_task_folder(tmp_path_factory.mktemp("tasks"))


def write_task_folder(root: Path) -> Path:
    """data/patients.csv, data/pharmacy.db (prescriptions, patients) and data/seqs.fasta under `root`."""
    (root / "data").mkdir()
    with open(root / "data" / "patients.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["patient_id", "age", "sex", "sodium"])
        w.writerows(PATIENTS)
    con = sqlite3.connect(root / "data" / "pharmacy.db")
    con.execute("CREATE TABLE prescriptions (subject_id INTEGER, drug TEXT, dose_val_rx TEXT)")
    con.execute("CREATE TABLE patients (subject_id INTEGER, gender TEXT)")
    con.executemany("INSERT INTO prescriptions VALUES (?, ?, ?)", PRESCRIPTIONS)
    con.executemany("INSERT INTO patients VALUES (?, ?)", [(i, "F" if i % 2 else "M") for i in range(1, 8)])
    con.commit()
    con.close()
    (root / "data" / "seqs.fasta").write_text(FASTA)
    return root


def make_task(
    task_id: str = "unit-csv-0",
    *,
    prompt: str = "What is the mean age of the female patients?",
    answer: Any = None,
    spec: AnswerSpec | None = None,
    files: list[ContextFile] | None = None,
) -> Task:
    female_ages = [age for _, age, sex, _ in PATIENTS if sex == "F"]
    return Task(
        task_id=task_id,
        dataset="unit",
        category="csv_mean",
        domain=Domain.BIOSTAT,
        split="test",
        prompt=prompt,
        answer=answer if answer is not None else sum(female_ages) / len(female_ages),
        answer_spec=spec or AnswerSpec(type=AnswerType.NUMERIC, abs_tol=1e-6),
        context_files=files
        if files is not None
        else [
            ContextFile(path="data/patients.csv", kind="csv"),
            ContextFile(path="data/pharmacy.db", kind="sqlite"),
            ContextFile(path="data/seqs.fasta", kind="fasta"),
        ],
    )


@pytest.fixture
def make_env(task_root: Path) -> Iterator[Callable[..., CodingEnv]]:
    reason = process_backend_unavailable()
    if reason:
        pytest.skip(reason)
    envs: list[CodingEnv] = []

    def build(explain: Any = None, **config: Any) -> CodingEnv:
        cfg = EnvConfig(**{"exec_timeout_s": 10.0, **config})
        env = CodingEnv(task_root, make_sandbox_factory(cfg, backend="process"), cfg, explain=explain)
        envs.append(env)
        return env

    yield build
    for env in envs:
        env.close()
