"""Build a task suite: run every generator, confirm each answer in the sandbox, write tasks.jsonl.

Work is kept per category in a parts folder beside the output, so an interrupted build resumes where it
stopped; the parts folder is removed once tasks.jsonl is written. Everything written into the output folder
is a pure function of (generators, sizes, seed): `dvc repro` reproduces it byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from components.common.io import atomic_write
from components.sandbox.protocol import Sandbox
from components.tasks.confirm import Confirmation, confirm_all
from components.tasks.generators import GenContext, Generator, all_generators
from components.tasks.record import Task, load_tasks, save_tasks

# valid is generated last, so that its prompts are checked against every train and test prompt (`seen`)
SPLITS = ("train", "test", "valid")


class SuiteSize(BaseModel):
    """How many tasks each generator makes per split. The valid split is where choices (which trained model to
    register) are read off, so the test split is read once, for the registered candidate; it is opt-in (0), so a
    size without it builds the suite it built before."""

    model_config = ConfigDict(extra="forbid")

    train_per_category: int = Field(ge=0)
    test_per_category: int = Field(ge=0)
    valid_per_category: int = Field(default=0, ge=0)


class CategoryReport(BaseModel):
    domain: str
    generated: int = 0
    confirmed: int = 0
    dropped: dict[str, int] = Field(default_factory=dict)  # kind (repeated_prompt, mismatch, ...) -> count
    examples: list[str] = Field(default_factory=list)  # a few "task_id: reason" lines of dropped tasks


class BuildReport(BaseModel):
    seed: int
    sizes: SuiteSize
    categories: dict[str, CategoryReport] = Field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(c.confirmed for c in self.categories.values())


@dataclass(frozen=True)
class Progress:
    """Callbacks a front end (rich, tqdm, Prefect logs) hooks into; all optional."""

    on_category: Callable[[str, int], None] | None = None  # category, tasks to confirm
    on_confirmed: Callable[[int], None] | None = None  # tasks just confirmed


def _fingerprint(category: str, sizes: SuiteSize, seed: int) -> str:
    return hashlib.sha256(f"{category}|{sizes.model_dump_json()}|{seed}".encode()).hexdigest()[:16]


def parts_dir(out_dir: Path) -> Path:
    return out_dir.parent / f".{out_dir.name}.parts"


def generate_category(gen: Generator, out_dir: Path, sizes: SuiteSize, seed: int) -> tuple[list[Task], int]:
    """The category's tasks over all splits, and how many repeats were dropped.

    Generators promise distinct prompts; this enforces it, since a repeated task inflates a suite and a test or
    valid task that repeats a train task leaks (a generator that partitions its prompts between train and test
    only, such as biostat's power questions, may draw a valid prompt another split holds: it is dropped here).
    """
    # shared resources (an EHR database's size) follow train + test alone: a valid split added to a size must leave
    # the seed's train and test tasks (ids, prompts, answers, files) as they were
    total = sizes.train_per_category + sizes.test_per_category
    tasks: list[Task] = []
    seen: set[str] = set()
    repeats = 0
    counts = (sizes.train_per_category, sizes.test_per_category, sizes.valid_per_category)
    for split, n in zip(SPLITS, counts, strict=True):
        if not n:
            continue
        ctx = GenContext(out_dir=out_dir, seed=seed, split=split, suite_per_category=total)
        for task in gen.generate(ctx, n):
            if task.prompt in seen:
                repeats += 1
                continue
            seen.add(task.prompt)
            tasks.append(task)
    return tasks, repeats


def _confirm_parallel(tasks: Sequence[Task], sandboxes: Sequence[Sandbox], chunk: int,
                      on_chunk: Callable[[int], None] | None) -> list[Confirmation]:
    """One contiguous slice of the tasks per sandbox, confirmed in parallel threads (the work is in the sandboxes)."""
    n = max(1, min(len(sandboxes), -(-len(tasks) // chunk)))
    size = -(-len(tasks) // n)
    slices = [tasks[i : i + size] for i in range(0, len(tasks), size)]
    with ThreadPoolExecutor(max_workers=n) as pool:
        results = pool.map(lambda job: confirm_all(job[0], job[1], chunk, on_chunk), zip(slices, sandboxes, strict=False))
        return [c for part in results for c in part]


def build_suite(out_dir: Path, sizes: SuiteSize, seed: int, open_sandbox: Callable[[Path], Sandbox], *,
                chunk: int = 200, workers: int = 2, generators: Sequence[Generator] | None = None,
                progress: Progress | None = None) -> BuildReport:
    """Generate, confirm and write `out_dir/tasks.jsonl`; `open_sandbox(out_dir)` opens a sandbox holding the
    suite's context files.

    Generation runs first for every category (it is fast and writes the context files), then confirmation,
    the slow part, resumes per category from the parts folder.
    """
    progress = progress or Progress()
    gens = sorted(generators or all_generators(), key=lambda g: g.category)
    parts = parts_dir(out_dir)
    parts.mkdir(parents=True, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    generated = {gen.category: (gen, *generate_category(gen, out_dir, sizes, seed)) for gen in gens}
    report = BuildReport(seed=seed, sizes=sizes)
    kept: list[Task] = []
    sandboxes: list[Sandbox] = []  # opened on first need, shared by every category
    try:
        for category, (gen, tasks, repeats) in generated.items():
            part, meta = parts / f"{category}.jsonl", parts / f"{category}.json"
            fingerprint = _fingerprint(category, sizes, seed)
            saved = json.loads(meta.read_text()) if meta.is_file() and part.is_file() else None
            if saved and saved["fingerprint"] == fingerprint:
                report.categories[category] = CategoryReport.model_validate(saved["report"])
                kept.extend(load_tasks(part))
                continue
            if not sandboxes:
                sandboxes.extend(open_sandbox(out_dir) for _ in range(workers))
            if progress.on_category:
                progress.on_category(category, len(tasks))
            confirmations = _confirm_parallel(tasks, sandboxes, chunk, progress.on_confirmed)
            cat, good = _tally(gen, tasks, confirmations)
            if repeats:
                cat.dropped["repeated_prompt"] = repeats
            cat.generated += repeats
            save_tasks(part, good)
            with atomic_write(meta) as fh:
                json.dump({"fingerprint": fingerprint, "report": cat.model_dump()}, fh)
            report.categories[category] = cat
            kept.extend(good)
    finally:
        for box in sandboxes:
            box.close()
    save_tasks(out_dir / "tasks.jsonl", kept)
    with atomic_write(out_dir / "build_report.json") as fh:
        fh.write(report.model_dump_json(indent=2))
    shutil.rmtree(parts)
    return report


def _tally(gen: Generator, tasks: Sequence[Task], confirmations: Sequence[Confirmation]) -> tuple[CategoryReport, list[Task]]:
    cat = CategoryReport(domain=gen.domain.value, generated=len(tasks))
    good = []
    for task, conf in zip(tasks, confirmations, strict=True):
        if conf.confirmed:
            good.append(task)
        else:
            cat.dropped[conf.kind] = cat.dropped.get(conf.kind, 0) + 1
            if len(cat.examples) < 3:
                cat.examples.append(f"{task.task_id}: {conf.reason}")
    cat.confirmed = len(good)
    return cat, good
