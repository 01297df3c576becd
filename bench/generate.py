"""Task generation throughput, and batched confirmation against one sandbox execution per task (the baseline).

    python -m bench.generate [--per-category N] [--confirm-sample M] [--backend process|docker]

Prints tasks per second per domain for generation alone, then the time to confirm a sample of tasks in the
sandbox two ways, measured in the same run: one execution per task (what a naive builder does) and batched
(what `medgym data build` does), with the ratio.
"""

from __future__ import annotations

import tempfile
import time
from collections import defaultdict
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from components.sandbox.factory import open_sandbox
from components.sandbox.protocol import Limits
from components.tasks.confirm import confirm_tasks
from components.tasks.generators import GenContext, all_generators
from components.tasks.record import Task


def main(per_category: int = typer.Option(200, help="tasks generated per category"),
         confirm_sample: int = typer.Option(300, help="tasks confirmed each way"),
         backend: str = typer.Option("process", help="sandbox backend for confirmation")) -> None:
    console = Console(width=110)
    out = Path(tempfile.mkdtemp(prefix="medgym-bench-"))
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    sample: list[Task] = []
    for gen in sorted(all_generators(), key=lambda g: g.category):
        started = time.perf_counter()
        tasks = list(gen.generate(GenContext(out_dir=out, seed=0, split="train"), per_category))
        seconds[gen.domain.value] += time.perf_counter() - started
        counts[gen.domain.value] += len(tasks)
        sample.extend(tasks[:2])
    table = Table(title=f"Generation ({per_category} tasks per category)")
    for col in ("domain", "tasks", "seconds", "tasks/s"):
        table.add_column(col, justify="right")
    for domain in sorted(counts):
        table.add_row(domain, str(counts[domain]), f"{seconds[domain]:.1f}", f"{counts[domain] / seconds[domain]:.0f}")
    total_n, total_s = sum(counts.values()), sum(seconds.values())
    table.add_row("all", str(total_n), f"{total_s:.1f}", f"{total_n / total_s:.0f}")
    console.print(table)

    sample = (sample * (confirm_sample // max(1, len(sample)) + 1))[:confirm_sample]
    limits = Limits(timeout_s=300, max_output_bytes=64 * 1024 * 1024, memory_mb=2048)
    with open_sandbox(backend, limits) as box:  # type: ignore[attr-defined]
        box.upload_dir(out / "files", "files")
        started = time.perf_counter()
        single = [c for t in sample for c in confirm_tasks([t], box)]
        one_each = time.perf_counter() - started
        started = time.perf_counter()
        batched = [c for i in range(0, len(sample), 200) for c in confirm_tasks(sample[i : i + 200], box)]
        batch_s = time.perf_counter() - started
    assert [c.confirmed for c in single] == [c.confirmed for c in batched]
    table = Table(title=f"Confirmation of {len(sample)} tasks in the {backend} sandbox")
    for col in ("method", "seconds", "tasks/s", "x baseline"):
        table.add_column(col, justify="right")
    table.add_row("one execution per task (baseline)", f"{one_each:.1f}", f"{len(sample) / one_each:.0f}", "1.00")
    table.add_row("batched, 200 per execution", f"{batch_s:.1f}", f"{len(sample) / batch_s:.0f}", f"{one_each / batch_s:.2f}")
    console.print(table)
    console.print(f"confirmed {sum(c.confirmed for c in batched)}/{len(batched)}; "
                  f"estimated generation + confirmation for 100,000 tasks on one worker: "
                  f"{100_000 / (total_n / total_s) + 100_000 * batch_s / len(sample):.0f} s")


if __name__ == "__main__":
    typer.run(main)
