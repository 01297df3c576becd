"""Re-ground EHRSQL / TREQS release questions on a seeded synthetic database (or run them on the real one).

Entry points:
- reground(rows, schema, db_path, seed) -> list[RegroundResult]: seed, write the database to db_path, run every
  question's reference SQL there and keep its result as the ground truth.
- reground_dataset(rows_with_line_numbers, dataset, out_dir, seed) -> (db path relative to out_dir, results):
  the importer's entry point; writes out_dir/files/ehr/<dataset>.sqlite.
- answers_on_real_db(rows, schema, db_path): the same SQL on a user-supplied (credentialed) database.
- result_width(con, sql): how many columns a query returns, so that a release's flat answer can be cut into rows.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from components.common.io import RecordError
from components.ehr.seeding import Seeder, read_need
from components.ehr.sqltime import postprocess
from components.ehr.synth import SCHEMAS, new_world, populate
from components.ehr.treqs_seeding import copy_counts, seed_question
from components.ehr.treqs_world import TreqsWorld

DATASET_SCHEMA = {"mimic_iii": "mimic_iii", "eicu": "eicu", "treqs": "treqs"}
BASE_PATIENTS = 120
QUERY_SECONDS = 20.0
T = TypeVar("T")


@dataclass
class RegroundResult:
    line: int | None
    id: str
    query: str  # the SQL as run (current_time pinned)
    # the result as SQLite returns it: rows of typed cells, which the ground truth keeps (the flat `answer`
    # cannot tell ['urgent', 1] from ['1', 'urgent'], nor one row of two columns from two rows of one)
    rows: list[list[Any]] = field(default_factory=list)
    error: str | None = None

    @property
    def answer(self) -> list[str]:
        """The release's form: every cell as a string, rows run together."""
        return format_answer(self.rows)

    @property
    def nonempty(self) -> bool:
        return self.error is None and is_nonempty(self.answer)


def format_answer(rows: list[tuple[Any, ...]] | list[list[Any]]) -> list[str]:
    """Flatten result rows into the release's list-of-strings answer."""
    return [str(v) for row in rows for v in row]


def is_nonempty(answer: list[str]) -> bool:
    return bool(answer) and any(a not in ("None", "") for a in answer)


def _timed(con: sqlite3.Connection, seconds: float, run: Callable[[], T]) -> T:
    deadline = time.monotonic() + seconds
    con.set_progress_handler(lambda: int(time.monotonic() > deadline), 10000)
    try:
        return run()
    finally:
        con.set_progress_handler(None, 0)


def run_rows(con: sqlite3.Connection, sql: str, seconds: float = QUERY_SECONDS) -> tuple[list[list[Any]], str | None]:
    """The query's rows with their SQLite types (int, float, str, None), or the error."""
    try:
        return _timed(con, seconds, lambda: [list(row) for row in con.execute(sql).fetchall()]), None
    except sqlite3.Error as exc:
        return [], f"{type(exc).__name__}: {exc}"


def run_query(con: sqlite3.Connection, sql: str, seconds: float = QUERY_SECONDS) -> tuple[list[str], str | None]:
    rows, err = run_rows(con, sql, seconds)
    return format_answer(rows), err


def result_width(con: sqlite3.Connection, sql: str, seconds: float = QUERY_SECONDS) -> int:
    """How many columns the query returns, read without fetching its rows (raises sqlite3.Error)."""
    return _timed(con, seconds, lambda: len(con.execute(sql).description or ()))


def _check_rows(rows: list[tuple[int | None, dict]], schema: str) -> None:
    if schema not in SCHEMAS:
        raise ValueError(f"unknown EHR schema {schema!r}; expected one of {SCHEMAS}")
    for line, row in rows:
        for name in ("query", "id"):
            if not isinstance(row.get(name), str) or not row[name].strip():
                raise RecordError(f"<{schema} rows>", line, name, "missing or not a non-empty string")


def _run_all(rows: list[tuple[int | None, dict]], schema: str, db_path: Path) -> list[RegroundResult]:
    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    out = []
    try:
        for line, row in rows:
            sql = postprocess(row["query"], schema)
            rows_out, err = run_rows(con, sql)
            out.append(RegroundResult(line, row["id"], sql, rows_out, err))
    finally:
        con.close()
    return out


def _numbered(rows: list[dict] | list[tuple[int | None, dict]]) -> list[tuple[int | None, dict]]:
    return [r if isinstance(r, tuple) else (None, r) for r in rows]


def seed_world(rows: list[tuple[int | None, dict]], schema: str, seed: int, n_patients: int = BASE_PATIENTS):
    world = populate(new_world(schema, seed), n_patients)
    if isinstance(world, TreqsWorld):
        counts = copy_counts(world.rng)
        for _, row in rows:
            seed_question(world, postprocess(row["query"], schema), next(counts))
    else:
        needs = [read_need(schema, postprocess(row["query"], schema), row.get("value")) for _, row in rows]
        Seeder(world).seed(needs)
    world.finish()
    return world


def reground(
    rows: list[dict] | list[tuple[int | None, dict]],
    schema: str,
    db_path: Path,
    seed: int,
    n_patients: int = BASE_PATIENTS,
) -> list[RegroundResult]:
    numbered = _numbered(rows)
    _check_rows(numbered, schema)
    world = seed_world(numbered, schema, seed, n_patients)
    world.store.write(Path(db_path))
    return _run_all(numbered, schema, Path(db_path))


def reground_dataset(
    rows_with_line_numbers: list[tuple[int, dict]], dataset: str, out_dir: Path, seed: int
) -> tuple[str, list[RegroundResult]]:
    """Seed one database for a whole release dataset (all splits together) under out_dir; return its relative path."""
    if dataset not in DATASET_SCHEMA:
        raise ValueError(f"no EHR schema for dataset {dataset!r}; expected one of {sorted(DATASET_SCHEMA)}")
    rel = f"files/ehr/{dataset}.sqlite"
    results = reground(rows_with_line_numbers, DATASET_SCHEMA[dataset], Path(out_dir) / rel, seed)
    return rel, results


def answers_on_real_db(
    rows: list[dict] | list[tuple[int | None, dict]], schema: str, db_path: Path
) -> list[RegroundResult]:
    """Run the release SQL on a real (credentialed) database the user points at, with EHRSQL's time pinning."""
    if not Path(db_path).is_file():
        raise FileNotFoundError(f"EHR database not found: {db_path}")
    numbered = _numbered(rows)
    _check_rows(numbered, schema)
    return _run_all(numbered, schema, Path(db_path))
