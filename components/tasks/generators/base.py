"""What a task generator is, and the registry the suite builder reads.

A generator makes tasks of one category. Each task carries `reference_code`: a self-contained Python program
that, run with the task folder as its working directory, prints the ground-truth answer as JSON on its last
line of stdout. The suite builder runs that code in the sandbox and keeps a task only when the sandbox's
answer passes the task's own checker against `Task.answer`.

Each generator module exposes `GENERATORS: list[Generator]`; `components.tasks.generators.all_generators()`
collects them.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from components.tasks.record import Domain, Task


@dataclass(frozen=True)
class GenContext:
    """Where and how to generate: context files go under `out_dir` and are referenced relative to it."""

    out_dir: Path
    seed: int
    split: str = "train"
    # tasks per category the whole build asks for, all splits together: generators size shared resources
    # (an EHR database's patient count) by it, so that a big suite does not run out of distinct questions
    suite_per_category: int = 0

    def rng(self, category: str) -> random.Random:
        # string seeds hash with SHA-512 in CPython: stable across runs and machines, unlike hash();
        # the split is part of the seed so that train and test draw different tasks
        return random.Random(f"{self.seed}:{self.split}:{category}")


class Generator(Protocol):
    category: str
    domain: Domain

    def generate(self, ctx: GenContext, n: int) -> Iterator[Task]:
        """Yield `n` tasks with ids `<category>/<split>/<i>`; deterministic for a given ctx.

        Prompts are distinct within a call, and never equal a prompt of another split of the same ctx
        (held-out splits must not leak); a category that cannot make `n` distinct tasks yields fewer.
        """
        ...


def task_id(category: str, split: str, i: int) -> str:
    return f"{category}/{split}/{i}"
