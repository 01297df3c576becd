"""Great Expectations suite for case files (cases.jsonl): schema, unique case ids, known splits and sources,
ICD-10 codes, a profile, at least one key exam and one event, events in time order, one split per patient, key
exams in the catalogue, a profile that never names its own diagnosis; and how much the best constant diagnosis
earns (at most 1/min(n, 10) + 0.10 of a generated cohort, as for generated task categories).

The frame is built from the raw JSON rows, not from validated records, so the expectations see bad rows too.
Imported notes are real text: a diagnosis name in the profile is allowed on up to 10% of imported rows (a note
may say "rule out pneumonia"), and only names of four characters or more are looked for there ("PE" is also the
physical exam).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ValidationError

from components.common.gx import validate_frame
from components.common.io import iter_jsonl
from components.diag.catalogue import Catalogue, default_catalogue, normalize
from components.diag.grading import grade_diagnosis
from components.diag.record import SOURCES, SPLITS, Case
from components.tasks.spread import spread_bound
from components.tasks.validation import Failure

REQUIRED = ("case_id", "patient_id", "split", "source", "profile", "diagnosis", "key_exams", "events")
MIN_CASES_FOR_BOUND = 100  # as for task categories: a small cohort exceeds the bound by chance
IMPORTED_LEAK_SHARE = 0.9


class ConstantDiagnosis(BaseModel):
    scope: str  # "all" or a split
    cases: int
    distinct: int  # distinct diagnoses
    best_constant: str | None
    best_share: float
    bound: float

    @property
    def within_bound(self) -> bool:
        return self.best_share <= self.bound + 1e-12


class CaseValidationReport(BaseModel):
    path: str
    rows: int
    success: bool
    failures: list[Failure]
    constant_diagnosis: list[ConstantDiagnosis]


def diagnosis_leak(profile: str, diagnosis: str, icd10: str | None, catalogue: Catalogue, min_chars: int = 1) -> str:
    """The first name of the case's own diagnosis (its text, its catalogue names and synonyms, its code) that the
    profile contains as whole words; "" if none."""
    text = f" {normalize(profile)} "
    names = {normalize(diagnosis)}
    disease = catalogue.disease(icd10)
    if disease is not None:
        names |= catalogue.disease_aliases(disease)
    for name in sorted(names, key=len, reverse=True):
        if len(name) >= min_chars and name and f" {name} " in text:
            return name
    if icd10 and icd10 in profile:
        return icd10
    return ""


def cases_frame(path: Path, records: list[tuple[int, dict[str, Any]]], catalogue: Catalogue) -> pd.DataFrame:
    rows = []
    splits_of: dict[str, set[str]] = {}
    for _, obj in records:
        splits_of.setdefault(str(obj.get("patient_id")), set()).add(str(obj.get("split")))
    for lineno, obj in records:
        events = obj.get("events") if isinstance(obj.get("events"), list) else []
        keys = obj.get("key_exams") if isinstance(obj.get("key_exams"), list) else []
        synthetic = obj.get("source", "synthetic") == "synthetic"
        profile, diagnosis = str(obj.get("profile") or ""), str(obj.get("diagnosis") or "")
        leak = diagnosis_leak(profile, diagnosis, obj.get("icd10"), catalogue, 1 if synthetic else 4) if diagnosis else ""
        splits = splits_of.get(str(obj.get("patient_id")), set())
        rows.append({
            "line": lineno,
            **{k: obj.get(k) for k in ("case_id", "patient_id", "split", "source", "profile", "diagnosis")},
            "missing_fields": ",".join(k for k in REQUIRED if k not in obj),
            "icd10_text": obj.get("icd10") or "",
            "key_exam_count": len(keys),
            "event_count": len(events),
            "event_order": _event_order(events),
            "bad_events": ",".join(f"events[{i}]" for i, e in enumerate(events) if not _event_ok(e)),
            "unknown_key_exams": ",".join(k for k in keys if synthetic and catalogue.exam(str(k)) is None),
            "leak_synthetic": leak if synthetic else "",
            "leak_imported": "" if synthetic else leak,
            "patient_splits": ",".join(sorted(splits)) if len(splits) > 1 else "",
        })
    return pd.DataFrame(rows)


def _event_ok(event: Any) -> bool:
    return (isinstance(event, dict) and event.get("source") in SOURCES and bool(event.get("label"))
            and isinstance(event.get("result"), str) and isinstance(event.get("time"), str))


def _event_order(events: list[Any]) -> str:
    times = []
    for e in events:
        try:
            times.append(datetime.fromisoformat(str(e.get("time"))) if isinstance(e, dict) else None)
        except ValueError:
            times.append(None)
    known = [(i, t) for i, t in enumerate(times) if t is not None]
    for (_, a), (j, b) in zip(known, known[1:], strict=False):
        if b < a:
            return f"events[{j}] is earlier than the event before it"
    return ""


def _expectations(E: Any) -> list[Any]:
    return [
        *(E.ExpectColumnValuesToNotBeNull(column=col)
          for col in ("case_id", "patient_id", "split", "source", "profile", "diagnosis")),
        E.ExpectColumnValuesToBeUnique(column="case_id"),
        E.ExpectColumnValuesToBeInSet(column="split", value_set=list(SPLITS)),
        E.ExpectColumnValuesToBeInSet(column="source", value_set=["synthetic", "diaggym"]),
        E.ExpectColumnValuesToBeInSet(column="missing_fields", value_set=[""]),
        E.ExpectColumnValuesToMatchRegex(column="icd10_text", regex=r"^$|^[A-Z][0-9][0-9A-Z](?:\.[0-9A-Z]{1,4})?$"),
        E.ExpectColumnValueLengthsToBeBetween(column="profile", min_value=40),
        E.ExpectColumnValuesToBeBetween(column="key_exam_count", min_value=1),
        E.ExpectColumnValuesToBeBetween(column="event_count", min_value=1),
        *(E.ExpectColumnValuesToBeInSet(column=col, value_set=[""])
          for col in ("event_order", "bad_events", "unknown_key_exams", "leak_synthetic", "patient_splits")),
        E.ExpectColumnValuesToBeInSet(column="leak_imported", value_set=[""], mostly=IMPORTED_LEAK_SHARE),
    ]


def validate_cases(path: Path | str, catalogue: Catalogue | None = None) -> CaseValidationReport:
    path = Path(path)
    cat = catalogue or default_catalogue()
    records = list(iter_jsonl(path))
    frame = cases_frame(path, records, cat)
    if frame.empty:
        return CaseValidationReport(path=str(path), rows=0, success=False, constant_diagnosis=[], failures=[
            Failure(expectation="non-empty file", column=None, unexpected=[], unexpected_count=0)])
    result = validate_frame(frame, "medgym_diag_cases", "cases", _expectations)
    failures = []
    for r in result.results:
        if r.success:
            continue
        column = r.expectation_config.kwargs.get("column")
        idx = r.result.get("unexpected_index_list") or []
        lines = [f"line {frame.loc[i, 'line']}: {frame.loc[i, column]!r}" for i in idx[:10]] if column else []
        failures.append(Failure(expectation=r.expectation_config.type, column=column, unexpected=lines,
                                unexpected_count=int(r.result.get("unexpected_count") or 0)))
    constants = constant_diagnosis(_valid_cases(records), cat)
    over = [c for c in constants if not c.within_bound]
    if over:
        failures.append(Failure(
            expectation="best constant diagnosis accepted on at most 1/min(n, 10) + 0.10 of a generated cohort",
            column="diagnosis", unexpected=[f"{c.scope}: {c.best_constant!r} accepted on {c.best_share:.1%} > "
                                            f"{c.bound:.1%}" for c in over], unexpected_count=len(over)))
    return CaseValidationReport(path=str(path), rows=len(frame), success=bool(result.success) and not over,
                                failures=failures, constant_diagnosis=constants)


def constant_diagnosis(cases: list[Case], catalogue: Catalogue) -> list[ConstantDiagnosis]:
    """Per scope (all generated cases, and each split) of at least MIN_CASES_FOR_BOUND cases: the one diagnosis
    string the grader accepts on the most cases, tried over every distinct diagnosis, with its share."""
    generated = [c for c in cases if c.source == "synthetic"]
    scopes = [("all", generated)] + [(s, [c for c in generated if c.split == s]) for s in SPLITS]
    out = []
    for scope, group in scopes:
        if len(group) < MIN_CASES_FOR_BOUND:
            continue
        kinds = Counter((c.icd10, c.diagnosis) for c in group)
        reps = {k: next(c for c in group if (c.icd10, c.diagnosis) == k) for k in kinds}
        best, share = None, 0.0
        for candidate in sorted({c.diagnosis for c in group}):
            accepted = sum(n for k, n in kinds.items() if grade_diagnosis(candidate, reps[k], catalogue).correct)
            if accepted / len(group) > share:
                best, share = candidate, accepted / len(group)
        distinct = len({c.disease_key for c in group})
        out.append(ConstantDiagnosis(scope=scope, cases=len(group), distinct=distinct, best_constant=best,
                                     best_share=share, bound=spread_bound(distinct)))
    return out


def _valid_cases(records: list[tuple[int, dict[str, Any]]]) -> list[Case]:
    out = []
    for _, obj in records:
        try:
            out.append(Case.model_validate(obj))
        except ValidationError:
            continue
    return out
