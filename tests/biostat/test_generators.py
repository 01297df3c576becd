"""Biostat generators: each category's reference_code reproduces the stored answer; output is deterministic."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from components.tasks.generators.base import GenContext
from components.tasks.generators.biostat import GENERATORS, PowerGenerator, _belongs_to
from components.tasks.record import AnswerType, Domain, Task

# one subprocess runs every program, each exec'd in a fresh namespace with the task folder as cwd: a program
# that forgets an import or a helper still fails, without paying the pandas/scipy import once per program
HARNESS = r"""
import contextlib, io, json, sys
out = []
for code in json.load(sys.stdin):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "<reference_code>", "exec"), {"__name__": "__main__"})
    out.append(buf.getvalue().strip().splitlines()[-1])
print(json.dumps(out))
"""


def run_programs(cwd: Path, programs: list[str]) -> list[object]:
    res = subprocess.run([sys.executable, "-c", HARNESS], input=json.dumps(programs), cwd=cwd,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return [json.loads(line) for line in json.loads(res.stdout)]


def generate(out: Path, n: int, seed: int = 11) -> list[Task]:
    ctx = GenContext(out_dir=out, seed=seed, split="train")
    return [t for g in GENERATORS for t in g.generate(ctx, n)]


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> tuple[Path, list[Task]]:
    out = tmp_path_factory.mktemp("biostat")
    return out, generate(out, 12)


def test_at_least_nine_categories_with_unique_names():
    cats = [g.category for g in GENERATORS]
    assert len(cats) >= 9 and len(set(cats)) == len(cats)
    assert all(g.domain == Domain.BIOSTAT for g in GENERATORS)


def test_reference_code_reproduces_stored_answer(generated):
    out, tasks = generated
    for t in tasks:  # every task references its file relative to the out dir, and the file exists
        for cf in t.context_files:
            assert (out / cf.path).is_file() and cf.path in t.prompt
    picked = tasks[::3]  # covers every category and both size/power targets
    got = run_programs(out, [t.reference_code for t in picked])
    for t, g in zip(picked, got, strict=True):
        if t.answer_spec.type == AnswerType.INTEGER:
            assert g == t.answer and isinstance(g, int), t.task_id
        else:
            assert g == pytest.approx(t.answer, rel=1e-9, abs=1e-12), t.task_id


def test_one_program_runs_standalone(generated):
    out, tasks = generated
    for t in (next(t for t in tasks if t.category == "biostat_logrank"),):
        res = subprocess.run([sys.executable, "-c", t.reference_code], cwd=out, capture_output=True, text=True,
                             timeout=60)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout.strip().splitlines()[-1]) == t.answer


def test_answer_types_suit_the_question(generated):
    _, tasks = generated
    by_cat: dict[str, set[str]] = {}
    for t in tasks:
        Task.model_validate(t.model_dump())  # round-trips through the record schema
        by_cat.setdefault(t.category, set()).add(t.answer_spec.type.value)
        if t.answer_spec.type == AnswerType.NUMERIC:
            assert t.answer_spec.rel_tol or t.answer_spec.abs_tol
    assert by_cat["biostat_power_two_sample_t"] == {"integer", "numeric"}


def test_same_seed_gives_identical_tasks_and_files(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    ta, tb = generate(a, 11), generate(b, 11)
    assert [t.model_dump() for t in ta] == [t.model_dump() for t in tb]
    files = sorted(p.relative_to(a) for p in a.rglob("*.csv"))
    assert files and files == sorted(p.relative_to(b) for p in b.rglob("*.csv"))
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    # every file written is one a task uses: no file is drawn and then left without questions
    assert {str(f) for f in files} == {cf.path for t in ta for cf in t.context_files}
    assert [t.prompt for t in generate(tmp_path / "c", 3, seed=12)] != [t.prompt for t in ta[:3]]


def test_prompts_are_distinct_within_and_across_splits(tmp_path):
    # questions used to be drawn with replacement, 10 per file: t-tests repeated at this n, and a survival
    # file has only 2-3 distinct questions
    for gen in GENERATORS:
        prompts = {}
        for split, n in (("train", 60), ("test", 15)):
            tasks = list(gen.generate(GenContext(out_dir=tmp_path, seed=0, split=split), n))
            prompts[split] = {t.prompt for t in tasks}
            assert len(tasks) == n and len(prompts[split]) == n, (gen.category, split)
        assert not prompts["train"] & prompts["test"], gen.category


def test_power_prompts_of_train_and_test_come_from_disjoint_halves(tmp_path):
    # power prompts name no file; the digest partition is what keeps a test prompt from equalling a train one
    for gen in (g for g in GENERATORS if isinstance(g, PowerGenerator)):
        for split, other in (("train", "test"), ("test", "train")):
            for t in gen.generate(GenContext(out_dir=tmp_path, seed=3, split=split), 20):
                assert _belongs_to(t.prompt, split) and not _belongs_to(t.prompt, other), t.task_id
