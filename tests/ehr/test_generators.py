"""Generated EHR tasks: their reference programs, run in the task folder, print the stored answers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from components.tasks.generators.base import GenContext
from components.tasks.generators.ehr import GENERATORS, db_relpath
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
        assert task.context_files[0].path == db_relpath(task.metadata["schema"], 11)
        assert task.context_files[0].path in task.prompt


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
    db = tmp_path / db_relpath(gen.schema, 4)
    stamp = db.stat().st_mtime_ns
    second = [t.model_dump() for t in gen.generate(ctx, 20)]
    assert db.stat().st_mtime_ns == stamp
    assert first == second
    assert len({t["task_id"] for t in first}) == 20
