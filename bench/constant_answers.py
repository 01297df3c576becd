"""How much a constant answer earns in each generated category (no sandbox: generation is host-side Python).

    python -m bench.constant_answers [--per-category N] [--seed S] [--save out.json] [--before before.json]

Generates N tasks per category (train split), then prints per category: the number of distinct answers, their
entropy in bits, the best constant, the share of tasks whose own checker accepts it, and the bound
1/min(n, 10) + 0.10 it is held to. `--save` writes the figures as JSON; `--before` adds a column with the
figures of an earlier run (say, of the code before a change) read from such a file.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from components.tasks.generators import all_generators
from components.tasks.spread import Spread, category_spread
from components.tasks.suite import SuiteSize, generate_category


def spreads(per_category: int, seed: int, only: list[str] | None = None) -> list[Spread]:
    sizes = SuiteSize(train_per_category=per_category, test_per_category=0)
    out = Path(tempfile.mkdtemp(prefix="medgym-spread-"))
    result = []
    for gen in sorted(all_generators(), key=lambda g: g.category):
        if only and not any(gen.category.startswith(p) for p in only):
            continue
        tasks, _ = generate_category(gen, out, sizes, seed)
        result.append(category_spread(gen.category, tasks))
    return result


def main(per_category: Annotated[int, typer.Option(help="tasks generated per category")] = 300,
         seed: Annotated[int, typer.Option(help="generation seed")] = 0,
         only: Annotated[list[str] | None, typer.Option(help="category prefixes to include (default: all)")] = None,
         save: Annotated[Path | None, typer.Option(help="write the figures here as JSON")] = None,
         before: Annotated[Path | None, typer.Option(help="JSON of an earlier run, shown beside this one")] = None,
         ) -> None:
    rows = spreads(per_category, seed, only)
    earlier = {r["category"]: r for r in json.loads(before.read_text())} if before else {}
    table = Table(title=f"Best constant answer per category ({per_category} tasks each, seed {seed})")
    cols = ["category", "tasks", "distinct", "entropy", "best constant", "accepted", "bound", "ok"]
    if earlier:
        cols[5:5] = ["before"]
    for col in cols:
        table.add_column(col, justify="left" if col in ("category", "best constant") else "right")
    for r in rows:
        cells = [r.category, str(r.tasks), str(r.distinct), f"{r.entropy_bits:.2f}", json.dumps(r.best_constant)[:24],
                 f"{r.best_share:.1%}", f"{r.bound:.1%}", "" if r.within_bound else "OVER"]
        if earlier:
            was = earlier.get(r.category)
            cells[5:5] = [f"{was['best_share']:.1%}" if was else "-"]
        table.add_row(*cells)
    Console(width=160).print(table)
    over = [r.category for r in rows if not r.within_bound]
    print(f"{len(rows) - len(over)}/{len(rows)} categories within the bound; over: {', '.join(over) or 'none'}")
    if save:
        save.write_text(json.dumps([r.model_dump(mode="json") for r in rows], indent=1, default=str))


if __name__ == "__main__":
    typer.run(main)
