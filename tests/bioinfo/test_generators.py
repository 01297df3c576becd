"""Bioinfo generators: each category's reference_code, run as a program in the out dir, prints the stored answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from components.tasks.bioinfo.seqtools import read_fasta
from components.tasks.generators.base import GenContext
from components.tasks.generators.bioinfo import GENERATORS
from components.tasks.record import AnswerType, Domain, Task


def generate(out: Path, n: int, seed: int = 5) -> list[Task]:
    ctx = GenContext(out_dir=out, seed=seed, split="train")
    return [t for g in GENERATORS for t in g.generate(ctx, n)]


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> tuple[Path, list[Task]]:
    out = tmp_path_factory.mktemp("bioinfo")
    return out, generate(out, 12)


def test_at_least_nine_categories_with_unique_names():
    cats = [g.category for g in GENERATORS]
    assert len(cats) >= 9 and len(set(cats)) == len(cats)
    assert all(g.domain == Domain.BIOINFO for g in GENERATORS)


def test_every_category_reference_code_prints_the_stored_answer(generated):
    out, tasks = generated
    seen: set[str] = set()
    for t in tasks:
        if t.category in seen and t.answer_spec.type != AnswerType.STRING:
            continue  # one program per category, plus every string answer (the case-sensitive ones matter most)
        seen.add(t.category)
        assert t.context_files[0].path in t.prompt and (out / t.context_files[0].path).is_file()
        res = subprocess.run([sys.executable, "-c", t.reference_code], cwd=out, capture_output=True, text=True,
                             timeout=30)
        assert res.returncode == 0, (t.task_id, res.stderr)
        assert json.loads(res.stdout.strip().splitlines()[-1]) == t.answer, t.task_id
    assert seen == {g.category for g in GENERATORS}


def test_answers_have_the_promised_shape(generated):
    _, tasks = generated
    for t in tasks:
        Task.model_validate(t.model_dump())
        if t.answer_spec.type == AnswerType.LIST:
            assert t.answer == sorted(t.answer) and all(isinstance(p, int) and p >= 1 for p in t.answer)
        elif t.answer_spec.type == AnswerType.INTEGER:
            assert isinstance(t.answer, int)
        elif t.answer_spec.type == AnswerType.STRING and t.category != "bioinfo_gc_content":
            assert set(t.answer) <= set("ACGTU") or t.answer.isupper() or "*" in t.answer


def test_planted_motif_positions_are_found(generated):
    out, tasks = generated
    for t in (t for t in tasks if t.category == "bioinfo_motif"):
        rid, motif = t.reference_code.strip().splitlines()[-1].split("'")[3:6:2]
        seq = read_fasta(out / t.context_files[0].path)[rid]
        assert all(seq[p - 1:p - 1 + len(motif)] == motif for p in t.answer)


def test_same_seed_gives_identical_tasks_and_files(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    ta, tb = generate(a, 11), generate(b, 11)
    assert [t.model_dump() for t in ta] == [t.model_dump() for t in tb]
    files = sorted(p.relative_to(a) for p in a.rglob("*.fasta"))
    assert files == sorted(p.relative_to(b) for p in b.rglob("*.fasta"))
    # every file written is one a task uses: no file is drawn and then left without questions
    assert {str(f) for f in files} == {cf.path for t in ta for cf in t.context_files}
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    assert [t.answer for t in generate(tmp_path / "c", 11, seed=6)] != [t.answer for t in ta]


def test_prompts_are_distinct_within_and_across_splits(tmp_path):
    # a file of 4 records used to serve 10 reverse-complement questions (one per record): repeats were certain
    for gen in GENERATORS:
        prompts = {}
        for split, n in (("train", 150), ("test", 30)):
            tasks = list(gen.generate(GenContext(out_dir=tmp_path, seed=0, split=split), n))
            prompts[split] = {t.prompt for t in tasks}
            assert len(tasks) == n and len(prompts[split]) == n, (gen.category, split)
        assert not prompts["train"] & prompts["test"], gen.category
