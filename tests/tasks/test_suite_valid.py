"""The generated suite's valid split: opt-in per size, confirmed in the sandbox like the others, never repeating a
train or test prompt, and leaving a seed's train and test tasks exactly as a build without it makes them."""

from __future__ import annotations

from pathlib import Path

from components.profile.config import DataConfig
from components.tasks.generators import all_generators
from components.tasks.record import load_tasks
from components.tasks.suite import SuiteSize, build_suite, generate_category
from components.tasks.validation import validate_tasks
from tests.tasks.test_suite import digest, opener

OFF = SuiteSize(train_per_category=3, test_per_category=2)
ON = SuiteSize(train_per_category=3, test_per_category=2, valid_per_category=2)
# one category of each kind of generator: the EHR one sizes a shared database by the suite, biostat's power
# questions partition prompts between train and test only, the CSV and FASTA ones write files per split
CATEGORIES = ("ehr_treqs_avg_age", "calc_anion_gap", "biostat_power_two_sample_t", "biostat_correlation_csv",
              "bioinfo_gc_content")


def _generators(names=CATEGORIES):
    return [g for g in all_generators() if g.category in names]


def test_a_valid_split_leaves_the_train_and_test_tasks_and_their_files_as_they_were(tmp_path):
    for gen in _generators():
        before, _ = generate_category(gen, tmp_path / "off" / gen.category, OFF, 5)
        after, _ = generate_category(gen, tmp_path / "on" / gen.category, ON, 5)
        held = [t for t in after if t.split != "valid"]
        assert [t.model_dump() for t in held] == [t.model_dump() for t in before], gen.category
        valid = [t for t in after if t.split == "valid"]
        assert [t.task_id for t in valid] == [f"{gen.category}/valid/{i}" for i in range(2)], gen.category
        assert not {t.prompt for t in valid} & {t.prompt for t in before}, gen.category
        # every file the train and test tasks read has the same bytes; valid's own files are beside them
        off, on = digest(tmp_path / "off" / gen.category), digest(tmp_path / "on" / gen.category)
        assert {p: h for p, h in on.items() if p in off} == off, gen.category


class _Echo:
    """A generator whose valid split asks its own train prompts again: the build must drop them, not leak them."""

    def __init__(self, inner):
        self.inner, self.category, self.domain = inner, inner.category, inner.domain

    def generate(self, ctx, n):
        if ctx.split != "valid":
            yield from self.inner.generate(ctx, n)
            return
        train = type(ctx)(out_dir=ctx.out_dir, seed=ctx.seed, split="train", suite_per_category=ctx.suite_per_category)
        for i, task in enumerate(self.inner.generate(train, n)):
            yield task.model_copy(update={"split": "valid", "task_id": f"{self.category}/valid/{i}"})


def test_a_valid_prompt_that_repeats_a_train_prompt_is_dropped_and_counted(tmp_path):
    gen = _Echo(_generators(("calc_anion_gap",))[0])
    tasks, repeats = generate_category(gen, tmp_path, ON, 0)
    assert repeats == 2 and {t.split for t in tasks} == {"train", "test"}


def test_valid_tasks_are_confirmed_in_the_sandbox_and_the_demo_size_opts_in(tmp_path):
    report = build_suite(tmp_path / "s", ON, 7, opener, generators=_generators(), chunk=4)
    tasks = load_tasks(tmp_path / "s" / "tasks.jsonl")
    by_split = {s: [t for t in tasks if t.split == s] for s in ("train", "test", "valid")}
    assert {s: len(v) for s, v in by_split.items()} == {"train": 15, "test": 10, "valid": 10}
    assert report.total == 35 and report.sizes.valid_per_category == 2
    assert all(not c.dropped for c in report.categories.values())  # every stored answer its sandbox run confirmed
    assert validate_tasks(tmp_path / "s" / "tasks.jsonl").success
    assert len({t.prompt for t in tasks}) == len(tasks)

    sizes = DataConfig().suites
    assert sizes["demo"].valid_per_category == 2 and sizes["full"].valid_per_category == 0
    assert SuiteSize(train_per_category=1, test_per_category=1).valid_per_category == 0  # other profiles opt in


def test_a_size_without_valid_writes_no_valid_task(tmp_path: Path):
    build_suite(tmp_path / "s", OFF, 7, opener, generators=_generators(("calc_anion_gap",)))
    assert {t.split for t in load_tasks(tmp_path / "s" / "tasks.jsonl")} == {"train", "test"}
