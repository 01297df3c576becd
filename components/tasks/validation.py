"""Great Expectations suite for task files: schema, unique ids, non-empty answers, known datasets and types; and
per category, how much a constant answer earns (components.tasks.spread)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, Field, ValidationError

from components.common.gx import validate_frame
from components.common.io import iter_jsonl
from components.tasks.record import AnswerType, Domain, Task
from components.tasks.spread import Spread, suite_spread

RELEASE_DATASETS = ("medcalcbench", "npowerai", "biocoder", "biodsbench", "mimic_iii", "eicu", "treqs")
SYNTHETIC_DATASETS = ("synthetic_medcalc", "synthetic_biostat", "synthetic_bioinfo",
                      "synthetic_mimic_iii", "synthetic_eicu", "synthetic_treqs")
KNOWN_DATASETS = RELEASE_DATASETS + SYNTHETIC_DATASETS
# a generated category is held to the constant-answer bound only from this many tasks on: in a demo suite of
# nine tasks two equal answers already exceed it by chance
MIN_TASKS_FOR_BOUND = 100
REQUIRED = ("task_id", "dataset", "category", "domain", "split", "prompt", "answer", "answer_spec")


class Failure(BaseModel):
    expectation: str
    column: str | None
    unexpected: list[str]
    unexpected_count: int


class ValidationReport(BaseModel):
    path: str
    rows: int
    success: bool
    failures: list[Failure]
    # per category: distinct answers, their entropy, the best constant and the share of tasks accepting it
    answer_spread: list[Spread] = Field(default_factory=list)


def tasks_frame(path: Path, records: list[tuple[int, dict[str, Any]]] | None = None) -> pd.DataFrame:
    """One row per task, flattened to the columns the expectations read (no pydantic: GE must see bad rows);
    `records` are the file's (line, object) pairs where the caller has read them already."""
    root = path.parent
    rows = []
    for lineno, obj in iter_jsonl(path) if records is None else records:
        spec = obj.get("answer_spec") if isinstance(obj.get("answer_spec"), dict) else {}
        files = obj.get("context_files") or []
        rows.append({
            "line": lineno,
            **{k: obj.get(k) for k in ("task_id", "dataset", "category", "domain", "split", "prompt", "source")},
            "missing_fields": ",".join(k for k in REQUIRED if k not in obj),
            "answer_json": "" if obj.get("answer") in (None, "", [], {}) else json.dumps(obj.get("answer")),
            "answer_type": spec.get("type"),
            "missing_context_files": ",".join(
                f.get("path", "?") for f in files if not (isinstance(f, dict) and (root / f.get("path", "")).is_file())
            ),
            "has_reference": bool(obj.get("reference_code")),
        })
    return pd.DataFrame(rows)


def _expectations(E: Any) -> list[Any]:
    return [
        *(E.ExpectColumnValuesToNotBeNull(column=col)
          for col in ("task_id", "dataset", "category", "domain", "split", "prompt", "answer_type")),
        E.ExpectColumnValuesToBeInSet(column="missing_fields", value_set=[""]),
        E.ExpectColumnValuesToBeUnique(column="task_id"),
        E.ExpectColumnValuesToMatchRegex(column="task_id", regex=r"^[^/\s]+/[^/\s]+/\d+$"),
        E.ExpectColumnValuesToBeInSet(column="dataset", value_set=list(KNOWN_DATASETS)),
        E.ExpectColumnValuesToBeInSet(column="domain", value_set=[d.value for d in Domain]),
        E.ExpectColumnValuesToBeInSet(column="answer_type", value_set=[t.value for t in AnswerType]),
        E.ExpectColumnValueLengthsToBeBetween(column="answer_json", min_value=1),
        E.ExpectColumnValueLengthsToBeBetween(column="prompt", min_value=20),
        E.ExpectColumnValuesToBeInSet(column="missing_context_files", value_set=[""]),
    ]


def validate_tasks(path: Path) -> ValidationReport:
    records = list(iter_jsonl(path))
    frame = tasks_frame(path, records)
    if frame.empty:
        return ValidationReport(path=str(path), rows=0, success=False,
                                failures=[Failure(expectation="non-empty file", column=None, unexpected=[], unexpected_count=0)])
    spreads = suite_spread(_valid_tasks(records))
    bound_failure = _bound_failure(spreads, _generated_categories(frame))
    result = validate_frame(frame, "medgym_tasks", "tasks", _expectations)
    failures = []
    for r in result.results:
        if r.success:
            continue
        column = r.expectation_config.kwargs.get("column")
        idx = r.result.get("unexpected_index_list") or []
        lines = [f"line {frame.loc[i, 'line']}: {frame.loc[i, column]!r}" for i in idx[:10]] if column else []
        failures.append(Failure(expectation=r.expectation_config.type, column=column, unexpected=lines,
                                unexpected_count=int(r.result.get("unexpected_count") or 0)))
    if bound_failure:
        failures.append(bound_failure)
    return ValidationReport(path=str(path), rows=len(frame), success=result.success and not bound_failure,
                            failures=failures, answer_spread=spreads)


def _valid_tasks(records: list[tuple[int, dict[str, Any]]]) -> list[Task]:
    """The rows that are valid tasks; the others are reported by the expectations."""
    tasks = []
    for _, obj in records:
        try:
            tasks.append(Task.model_validate(obj))
        except ValidationError:
            continue
    return tasks


def _generated_categories(frame: pd.DataFrame) -> set[str]:
    """Categories whose every task is generated: imported rows keep their release's answers, whatever they are."""
    generated = frame["source"].fillna("generated") == "generated"
    return set(frame.loc[generated, "category"].dropna()) - set(frame.loc[~generated, "category"].dropna())


def _bound_failure(spreads: list[Spread], generated: set[str]) -> Failure | None:
    over = [s for s in spreads if s.category in generated and s.tasks >= MIN_TASKS_FOR_BOUND and not s.within_bound]
    if not over:
        return None
    return Failure(expectation="best constant answer accepted on at most 1/min(n, 10) + 0.10 of a category",
                   column="answer", unexpected=[f"{s.category}: {json.dumps(s.best_constant, default=str)[:40]} accepted on "
                                                f"{s.best_share:.1%} > {s.bound:.1%}" for s in over[:10]],
                   unexpected_count=len(over))
