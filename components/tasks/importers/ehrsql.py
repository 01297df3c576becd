"""EHRSQL and TREQS questions (MIMIC-III, eICU, TREQS) as runnable tasks.

Their databases are credentialed. By default each question is re-grounded on a synthetic database with the
same schema: the entities its `value` field (or, for TREQS, its SQL) names are seeded into the database, its
reference SQL is run there, and that result becomes the ground truth. A user who holds the real database
passes it instead and keeps the release's answers.

The ground truth is the result's rows of typed cells (the release flattens them into one list of strings,
which loses which value belongs to which column); checkers compare them as a multiset of rows, or as a list
where the query orders them.
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
from typing import Any

from components.common.io import RecordError
from components.ehr.sqltime import CURRENT_TIME, postprocess
from components.tasks.answer_forms import typed_cell
from components.tasks.record import AnswerSpec, AnswerType, ContextFile, Domain, Task

SHAPE_REFUSAL = "the release answer does not divide into rows of the query's columns"
SCHEMA_NAMES = {"mimic_iii": "MIMIC-III", "eicu": "eICU", "treqs": "TREQS (MIMIC-III derived)"}


def ehr_reference_code(db_path: str, sql: str) -> str:
    """`sql` as it runs: after EHRSQL's post-processing (fixed "now", date formats)."""
    return (
        "import json, sqlite3\n"
        f"con = sqlite3.connect('file:{db_path}?mode=ro', uri=True)\n"
        f"rows = con.execute({sql!r}).fetchall()\n"
        "print(json.dumps([list(row) for row in rows], default=str))\n"
    )


def category_of(dataset: str, row: dict[str, Any]) -> str:
    if dataset == "treqs":
        head = re.match(r"\s*select\s+(count|max|min|avg)\b", row["query"], re.I)
        return f"treqs_{head.group(1).lower() if head else 'lookup'}"
    keys = sorted(k.removesuffix("_name").removesuffix("_id") for k in (row.get("value") or {}))
    return f"ehrsql_{dataset}_{'_'.join(keys) or 'population'}"


def is_ordered(sql: str) -> bool:
    """Whether the query orders its rows (a single row, LIMIT 1, has no order to keep)."""
    return bool(re.search(r"\border\s+by\b", sql, re.I)) and not re.search(r"\blimit\s+1\s*$", sql.strip(), re.I)


def answer_spec_for(sql: str) -> AnswerSpec:
    # cells are compared as SQLite holds them: text exactly (after trimming), numbers by value
    return AnswerSpec(type=AnswerType.ORDERED_ROWS if is_ordered(sql) else AnswerType.ROWS, case_sensitive=True)


def prompt_for(dataset: str, question: str, db_path: str, ordered: bool = False) -> str:
    order = " in the order asked" if ordered else ""
    return (f"{question}\n\nThe SQLite database `{db_path}` holds {SCHEMA_NAMES[dataset]} data with the table and "
            f"column names EHRSQL uses. Treat {CURRENT_TIME} as the current time. "
            f"Submit the result rows{order} as a JSON list of rows, each a list of the values asked for "
            f"(e.g. [[\"a\", 1], [\"b\", 2]]); where each row holds one value, a plain list of values will do.")


def release_rows(answer: list[Any], width: int) -> list[list[Any]]:
    """The release's flat all-string answer cut into rows of `width` typed cells (ValueError where it does not divide)."""
    if width < 1 or len(answer) % width:
        raise ValueError(f"the release answer's {len(answer)} value(s) do not make rows of {width} column(s)")
    cells = [typed_cell(v) if isinstance(v, str) else v for v in answer]
    return [cells[i:i + width] for i in range(0, len(cells), width)]


def _answers_on_real_db(todo: list[tuple[str, Path, int, dict[str, Any], Any]], dataset: str,
                        db_path: Path) -> list[tuple[list[list[Any]] | None, str | None, str]]:
    """The release's answers, shaped by the width of each query's result on the user's database."""
    from components.ehr.reground import DATASET_SCHEMA, result_width

    out: list[tuple[list[list[Any]] | None, str | None, str]] = []
    con = sqlite3.connect(f"file:{Path(db_path).resolve()}?mode=ro", uri=True)
    try:
        for *_, row, _ in todo:
            sql = postprocess(row["query"], DATASET_SCHEMA[dataset])
            try:
                out.append((release_rows(row.get("answer") or [], result_width(con, sql)), None, sql))
            except sqlite3.Error as exc:
                out.append((None, f"{type(exc).__name__}: {exc}", sql))
            except ValueError:
                out.append((None, SHAPE_REFUSAL, sql))
    finally:
        con.close()
    return out


def _empty(rows: list[list[Any]] | None) -> bool:
    return not rows or all(cell in (None, "None", "") for row in rows for cell in row)


def _validate(dataset: str, path: Path, index: int, row: dict[str, Any]) -> None:
    for name in ("question", "query"):
        if not isinstance(row.get(name), str) or not row[name].strip():
            raise RecordError(path, index + 1, name, "missing or not a non-empty string")
    if dataset != "treqs" and not isinstance(row.get("value", {}), dict):
        raise RecordError(path, index + 1, "value", f"expected an object, got {row.get('value')!r}")
    if not isinstance(row.get("answer", []), list):
        raise RecordError(path, index + 1, "answer", f"expected a list, got {row.get('answer')!r}")


def import_ehrsql(dataset: str, files: list[tuple[str, Path, list[tuple[int, dict[str, Any]]], Any]],
                  out: Path, options: Any) -> list[Task]:
    """All splits of one EHRSQL dataset; fills each file's counts (imported, refused, malformed) in place."""
    from components.ehr.reground import reground_dataset

    db_rel = f"files/ehr/{dataset}.sqlite"
    todo: list[tuple[str, Path, int, dict[str, Any], Any]] = []
    for split, path, rows, counts in files:
        for index, row in rows:
            try:
                _validate(dataset, path, index, row)
            except RecordError as exc:
                counts.malformed.append(str(exc))
                continue
            if row.get("is_impossible"):
                counts.refused["marked impossible in the release: the question has no answer"] += 1
                continue
            todo.append((split, path, index, row, counts))

    real_db = options.ehr_databases.get(dataset)
    if real_db is not None:
        target = out / db_rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.exists():
            target.unlink()
        os.symlink(Path(real_db).resolve(), target)
        answers = _answers_on_real_db(todo, dataset, Path(real_db))
    else:
        _, results = reground_dataset([(index + 1, row) for _, _, index, row, _ in todo], dataset, out, options.seed)
        answers = [(r.rows, r.error, r.query) for r in results]

    tasks = []
    for (split, _path, index, row, counts), (answer, error, sql) in zip(todo, answers, strict=True):
        if error:
            counts.refused[error if error == SHAPE_REFUSAL else f"reference SQL failed on the database: {error.split(':')[0]}"] += 1
            continue
        if _empty(answer):
            counts.refused["the reference SQL finds nothing on the database (empty answer)"] += 1
            continue
        tasks.append(Task(
            task_id=f"{dataset}/{split}/{index}", dataset=dataset, category=category_of(dataset, row),
            domain=Domain.EHR, split=split, prompt=prompt_for(dataset, row["question"], db_rel, is_ordered(row["query"])),
            answer=answer, answer_spec=answer_spec_for(row["query"]),
            context_files=[ContextFile(path=db_rel, kind="sqlite")],
            reference_code=ehr_reference_code(db_rel, sql), source="medagentgym",
            metadata={"release_id": row.get("id"), "release_answer": row.get("answer"),
                      "value": row.get("value"), "sql": row["query"], "grounding": "real" if real_db else "synthetic"},
        ))
        counts.imported += 1
    return tasks
