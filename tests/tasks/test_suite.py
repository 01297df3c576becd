"""The suite builder: generated answers confirmed in a real sandbox, deterministic output, resumable work."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from components.sandbox.factory import open_sandbox
from components.sandbox.protocol import Limits
from components.tasks.generators import all_generators
from components.tasks.record import load_tasks
from components.tasks.suite import SuiteSize, build_suite, parts_dir
from components.tasks.validation import validate_tasks

SIZES = SuiteSize(train_per_category=2, test_per_category=1)


def opener(out_dir: Path):
    box = open_sandbox("process", Limits(timeout_s=120, max_output_bytes=16 * 1024 * 1024))
    if (out_dir / "files").is_dir():
        box.upload_dir(out_dir / "files", "files")
    return box


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def generators():
    gens = all_generators()
    # one generator per domain keeps this fast; the slow test builds every category
    by_domain = {}
    for g in sorted(gens, key=lambda g: g.category):
        by_domain.setdefault(g.domain, g)
    return list(by_domain.values())


def test_the_suite_has_at_least_40_categories_over_four_domains():
    gens = all_generators()
    assert len(gens) >= 40
    assert {g.domain.value for g in gens} == {"ehr", "calculator", "biostat", "bioinfo"}


def test_build_confirms_validates_and_is_deterministic(tmp_path, generators):
    a = build_suite(tmp_path / "a", SIZES, 7, opener, generators=generators, chunk=2)
    build_suite(tmp_path / "b", SIZES, 7, opener, generators=generators, chunk=2)
    assert a.total == len(generators) * 3
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
    assert validate_tasks(tmp_path / "a" / "tasks.jsonl").success
    c = build_suite(tmp_path / "c", SIZES, 8, opener, generators=generators)
    assert (tmp_path / "c" / "tasks.jsonl").read_bytes() != (tmp_path / "a" / "tasks.jsonl").read_bytes()
    assert not parts_dir(tmp_path / "a").exists()
    tasks = load_tasks(tmp_path / "a" / "tasks.jsonl")
    assert {t.split for t in tasks} == {"train", "test"}
    assert c.total == a.total


class _Lying:
    """A generator whose stored answer disagrees with its own reference code: the build must drop it."""

    def __init__(self, inner):
        self.inner, self.category, self.domain = inner, inner.category, inner.domain

    def generate(self, ctx, n):
        for i, task in enumerate(self.inner.generate(ctx, n)):
            if i == 0:
                wrong = task.answer * 3 + 1000
                spec = task.answer_spec.model_copy(update={"lower": wrong * 0.95, "upper": wrong * 1.05})
                task = task.model_copy(update={"answer": wrong, "answer_spec": spec})
            yield task


def test_a_wrong_stored_answer_is_dropped(tmp_path):
    gen = next(g for g in all_generators() if g.category == "calc_bmi")
    report = build_suite(tmp_path / "out", SIZES, 0, opener, generators=[_Lying(gen)])
    cat = report.categories["calc_bmi"]
    # the first task of each split lies
    assert cat.generated == 3 and cat.confirmed == 1 and cat.dropped == {"mismatch": 2}
    assert "calc_bmi/train/0" in cat.examples[0]


def test_build_resumes_from_confirmed_categories(tmp_path, generators):
    calls = []

    def counting_opener(out_dir):
        calls.append(1)
        return opener(out_dir)

    out = tmp_path / "out"
    parts = parts_dir(out)
    # a first build that dies after the first category
    class Boom(Exception):
        pass

    def dying_progress_category(category, n, seen=[]):  # noqa: B006 - a counter across calls
        seen.append(category)
        if len(seen) == 2:
            raise Boom

    from components.tasks.suite import Progress

    with pytest.raises(Boom):
        build_suite(out, SIZES, 3, counting_opener, generators=generators, workers=1,
                    progress=Progress(on_category=dying_progress_category))
    assert len(list(parts.glob("*.jsonl"))) == 1
    confirmed = []
    build_suite(out, SIZES, 3, counting_opener, generators=generators, workers=1,
                progress=Progress(on_category=lambda c, n: confirmed.append(c)))
    assert len(confirmed) == len(generators) - 1  # the saved category was not confirmed again
    assert len(load_tasks(out / "tasks.jsonl")) == len(generators) * 3


def test_a_suite_of_some_categories_takes_their_generators_and_refuses_an_unknown_one():
    from components.tasks.generators import all_generators, generators_for

    assert [g.category for g in generators_for(None)] == [g.category for g in all_generators()]
    picked = generators_for(["bioinfo_hamming", "calc_anion_gap"])
    assert [g.category for g in picked] == ["bioinfo_hamming", "calc_anion_gap"]
    with pytest.raises(ValueError, match=r"no task generator for categories \['calc_nonesuch'\]"):
        generators_for(["calc_anion_gap", "calc_nonesuch"])
