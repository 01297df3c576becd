"""Generated EHR tasks: their reference programs, run in the task folder, print the stored answers."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from components.tasks.generators.base import GenContext
from components.tasks.generators.ehr import GENERATORS, db_relpath, n_patients, split_of
from components.tasks.record import Domain


def test_at_least_ten_categories_over_three_schemas() -> None:
    cats = {g.category for g in GENERATORS}
    assert len(cats) == len(GENERATORS) >= 10
    assert {g.schema for g in GENERATORS} == {"mimic_iii", "eicu", "treqs"}


def test_reference_code_prints_the_answer(tmp_path: Path) -> None:
    ctx = GenContext(out_dir=tmp_path, seed=11, split="valid")
    tasks = [t for g in GENERATORS for t in g.generate(ctx, 2)]
    # one interpreter runs every reference program in turn (each in a fresh namespace) to keep the test fast
    runner = (
        "import contextlib, io, json, sys\n"
        "out = []\n"
        "for code in json.load(sys.stdin):\n"
        "    buf = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buf):\n"
        "        exec(compile(code, '<ref>', 'exec'), {'__name__': '__main__'})\n"
        "    out.append(buf.getvalue().strip().splitlines()[-1])\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", runner],
        input=json.dumps([t.reference_code for t in tasks]),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    printed = [json.loads(line) for line in json.loads(proc.stdout)]
    for task, got in zip(tasks, printed, strict=True):
        assert got == task.answer, task.task_id
        assert (
            task.domain == Domain.EHR and task.split == "valid" and task.task_id.startswith(task.category + "/valid/")
        )
        path = task.context_files[0].path
        assert path == db_relpath(task.metadata["schema"], hashlib.sha256((tmp_path / path).read_bytes()).hexdigest())
        assert path in task.prompt


def test_one_program_runs_as_a_separate_process(tmp_path: Path) -> None:
    task = next(GENERATORS[0].generate(GenContext(out_dir=tmp_path, seed=1), 1))
    proc = subprocess.run(
        [sys.executable, "-c", task.reference_code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == task.answer


def test_database_built_once_and_tasks_deterministic(tmp_path: Path) -> None:
    gen = GENERATORS[2]
    ctx = GenContext(out_dir=tmp_path, seed=4)
    first = [t.model_dump() for t in gen.generate(ctx, 20)]
    db = tmp_path / first[0]["context_files"][0]["path"]
    stamp = db.stat().st_mtime_ns
    second = [t.model_dump() for t in gen.generate(ctx, 20)]
    assert db.stat().st_mtime_ns == stamp
    assert first == second
    assert len({t["task_id"] for t in first}) == 20


def test_splits_are_distinct_and_disjoint_at_moderate_size(tmp_path: Path) -> None:
    # the suite builder drops repeated prompts: every category must make n distinct tasks per split, and no test
    # prompt may repeat a train prompt (train and test ask about disjoint patients and entities)
    per_split = {"train": 150, "test": 40}
    ctx = {s: GenContext(out_dir=tmp_path, seed=3, split=s, suite_per_category=sum(per_split.values())) for s in per_split}
    for gen in GENERATORS:
        prompts = {s: [t.prompt for t in gen.generate(ctx[s], n)] for s, n in per_split.items()}
        for split, n in per_split.items():
            assert len(set(prompts[split])) == len(prompts[split]) == n, (gen.category, split)
        assert not set(prompts["train"]) & set(prompts["test"]), gen.category
    # one shared database per schema for the whole build, not one per category or split
    assert len(list((tmp_path / "files/ehr").glob("*.sqlite"))) == 3


def test_suite_size_sizes_the_database_and_names_it(tmp_path: Path) -> None:
    small, big = (GenContext(out_dir=tmp_path, seed=5, suite_per_category=k) for k in (10, 1200))
    gen = next(g for g in GENERATORS if g.category == "ehr_patient_gender")
    paths = {k: next(gen.generate(ctx, 1)).context_files[0].path for k, ctx in ((10, small), (1200, big))}
    assert paths[10] != paths[1200]
    assert n_patients(1200) > n_patients(10)
    sizes = {}
    for k in (10, 1200):
        con = sqlite3.connect(tmp_path / paths[k])
        sizes[k] = con.execute("select count(*) from patients").fetchone()[0]
        con.close()
    assert sizes[1200] > sizes[10]


def test_same_seed_same_database_bytes_and_tasks(tmp_path: Path) -> None:
    gen = next(g for g in GENERATORS if g.category == "ehr_drug_route")
    runs = []
    for name in ("a", "b"):
        ctx = GenContext(out_dir=tmp_path / name, seed=9, split="test", suite_per_category=40)
        runs.append([t.model_dump() for t in gen.generate(ctx, 15)])
    assert runs[0] == runs[1]
    rel = runs[0][0]["context_files"][0]["path"]
    assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()


def test_database_names_carry_no_generation_parameters(tmp_path: Path) -> None:
    # the agent reads the name in its prompt: a seed or a size there would tell it which generation it faces
    gen = next(g for g in GENERATORS if g.category == "ehr_patient_gender")
    names = set()
    for seed, size in ((7, 150), (8, 150), (7, 1200)):
        task = next(gen.generate(GenContext(out_dir=tmp_path, seed=seed, suite_per_category=size), 1))
        name = Path(task.context_files[0].path).name
        assert re.fullmatch(r"mimic_iii_[0-9a-f]{16}\.sqlite", name), name
        assert f"s{seed}" not in name and str(n_patients(size)) not in name
        names.add(name)
    assert len(names) == 3  # different databases, different files
    assert not list((tmp_path / "files/ehr").glob(".*"))  # no scratch file left behind


def test_split_owner_is_stable_and_unknown_split_is_named(tmp_path: Path) -> None:
    assert split_of(0, "mimic_iii:patient:101") == split_of(0, "mimic_iii:patient:101")
    owners = [split_of(0, f"mimic_iii:patient:{i}") for i in range(2000)]
    assert 0.15 < owners.count("test") / 2000 < 0.25 and 0.70 < owners.count("train") / 2000 < 0.80
    with pytest.raises(ValueError, match="holdout"):
        next(GENERATORS[0].generate(GenContext(out_dir=tmp_path, seed=0, split="holdout"), 1))
