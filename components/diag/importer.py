"""DiagGym-format records into cases, for users who hold MIMIC-IV access.

DiagGym's training layout: a JSON object keyed by note id; each record has `text` (the discharge note),
`discharge_diagnosis`, `reformat_physical_exam` (a list of {exam_name, exam_results}) and `events` (a list of
{time, source: lab | microbiology | radiology, data: {label, lab_data}}). SRC is one such file or a folder of them.

Per record: the profile is the note without the sections that tell the outcome (discharge diagnosis, condition,
medications and instructions, hospital course, pertinent results, procedures, the note's own exam section), followed
by the physical exam from `reformat_physical_exam`; the diagnosis is the first line of `discharge_diagnosis`
(headers such as "Primary:" skipped), mapped to the catalogue's ICD-10 code where a name or synonym matches; each
event's label is matched to the catalogue (MIMIC's own labels are among the synonyms) and events are sorted by time;
the key exams are the first `max_key_exams` distinct exams recorded (under their credit names). The patient is the
subject id before the first '-' of the note id (MIMIC's "10000032-DS-22"); splits are by patient.

A malformed record is reported with the file, the record (its note id) and the field, and the good records are
still imported (`strict` raises on the first instead).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from components.common.io import RecordError, atomic_write
from components.diag.catalogue import Catalogue, default_catalogue, normalize
from components.diag.record import SOURCES, Case, ExamEvent, Finding, assign_split, save_cases

DROP_SECTIONS = ("discharge", "brief hospital course", "hospital course", "pertinent results", "followup",
                 "follow up", "major surgical or invasive procedure", "physical exam", "impression", "assessment",
                 "plan", "labs", "imaging")
KNOWN_SECTIONS = DROP_SECTIONS + (
    "name", "unit no", "admission date", "date of birth", "sex", "service", "allergies", "attending",
    "chief complaint", "history of present illness", "past medical history", "past surgical history",
    "social history", "family history", "medications on admission", "review of systems", "history")
_HEADER = re.compile(r"^[ \t]*(?P<h>[A-Za-z][A-Za-z /&,()-]{1,60}?)[ \t]*:", re.MULTILINE)
_DIAGNOSIS_HEADER = re.compile(r"^(?:primary|secondary)(?:\s+diagnos[ie]s)?\s*:?$|^diagnos[ie]s\s*:?$", re.IGNORECASE)


class DiagRecordError(RecordError):
    """A bad record in a DiagGym file; the message names the file, the record (note id) and the field."""

    def __init__(self, path: Path | str, record: str | None, field: str | None, problem: str):
        self.path, self.record, self.field, self.problem, self.line = str(path), record, field, problem, None
        where = str(path)
        if record is not None:
            where += f", record '{record}'"
        if field:
            where += f", field '{field}'"
        ValueError.__init__(self, f"{where}: {problem}")


class ImportOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seed: int = 0
    test_fraction: float = Field(default=0.2, ge=0, le=1)
    max_key_exams: int = Field(default=10, ge=1, description="the first this many distinct exams are the key exams")
    strict: bool = Field(default=False, description="raise on the first malformed record instead of reporting it")


class ImportReport(BaseModel):
    files: list[str]
    records: int
    imported: int
    malformed: list[str]  # one message per bad record or file: file, record, field, problem
    diagnoses_matched: int  # cases whose diagnosis maps to a catalogue disease
    events: int
    events_matched: int  # events whose label maps to a catalogue exam
    unmatched_labels: dict[str, int]  # the commonest labels not in the catalogue
    splits: dict[str, int]


def source_files(src: Path) -> list[Path]:
    if src.is_file():
        return [src]
    if src.is_dir():
        files = sorted(p for p in src.rglob("*.json") if p.is_file())
        if files:
            return files
        raise FileNotFoundError(f"{src}: no .json files (DiagGym records: a JSON object keyed by note id)")
    raise FileNotFoundError(f"{src} does not exist")


def read_records(path: Path) -> Iterator[tuple[str, Any]]:
    """(note id, record) pairs of one DiagGym file; a file that is not a JSON object raises DiagRecordError."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DiagRecordError(path, None, None, f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
                              ) from None
    except UnicodeDecodeError as exc:
        raise DiagRecordError(path, None, None, f"not UTF-8 text ({exc.reason})") from None
    if not isinstance(data, dict):
        raise DiagRecordError(path, None, None, f"expected a JSON object keyed by note id, got {type(data).__name__}")
    yield from data.items()


def import_diaggym(src: Path | str, out_dir: Path | str, options: ImportOptions | None = None,
                   catalogue: Catalogue | None = None) -> ImportReport:
    """Write out_dir/cases.jsonl and out_dir/import_report.json from the DiagGym file(s) at `src`."""
    options = options or ImportOptions()
    cat = catalogue or default_catalogue()
    src, out = Path(src), Path(out_dir)
    files = source_files(src)
    cases: list[Case] = []
    malformed: list[str] = []
    records = 0
    seen: set[str] = set()
    for path in files:
        try:
            for note_id, record in read_records(path):
                records += 1
                try:
                    if note_id in seen:
                        raise DiagRecordError(path, note_id, None, "note id already imported from an earlier file")
                    cases.append(case_from_record(path, note_id, record, options, cat))
                    seen.add(note_id)
                except DiagRecordError as exc:
                    if options.strict:
                        raise
                    malformed.append(str(exc))
        except DiagRecordError as exc:
            if options.strict or exc.record is not None:
                raise
            malformed.append(str(exc))
    save_cases(out / "cases.jsonl", cases)
    events = [e for c in cases for e in c.events]
    unmatched = Counter(e.label for e in events if e.exam is None)
    report = ImportReport(files=[str(p) for p in files], records=records, imported=len(cases), malformed=malformed,
                          diagnoses_matched=sum(c.icd10 is not None for c in cases), events=len(events),
                          events_matched=sum(e.exam is not None for e in events),
                          unmatched_labels=dict(unmatched.most_common(50)),
                          splits=dict(sorted(Counter(c.split for c in cases).items())))
    with atomic_write(out / "import_report.json") as fh:
        fh.write(report.model_dump_json(indent=2))
    return report


def case_from_record(path: Path, note_id: str, record: Any, options: ImportOptions, catalogue: Catalogue) -> Case:
    def fail(field: str | None, problem: str) -> DiagRecordError:
        return DiagRecordError(path, note_id, field, problem)

    if not isinstance(record, dict):
        raise fail(None, f"expected a JSON object, got {type(record).__name__}")
    text = _text_field(record, "text", fail)
    diagnosis_raw = record.get("discharge_diagnosis")
    if isinstance(diagnosis_raw, list):
        diagnosis_raw = "\n".join(str(d) for d in diagnosis_raw if isinstance(d, str))
    if not isinstance(diagnosis_raw, str) or not diagnosis_raw.strip():
        raise fail("discharge_diagnosis", "missing or empty" if diagnosis_raw in (None, "", []) else
                   f"expected text, got {type(diagnosis_raw).__name__}")
    diagnosis = primary_diagnosis(diagnosis_raw)
    if not diagnosis:
        raise fail("discharge_diagnosis", "no diagnosis line (only headers)")
    findings = []
    exam_raw = record.get("reformat_physical_exam")
    if exam_raw is None:
        raise fail("reformat_physical_exam", "missing")
    if not isinstance(exam_raw, list):
        raise fail("reformat_physical_exam", f"expected a list, got {type(exam_raw).__name__}")
    for i, item in enumerate(exam_raw):
        if not isinstance(item, dict):
            raise fail(f"reformat_physical_exam[{i}]", f"expected an object, got {type(item).__name__}")
        for key in ("exam_name", "exam_results"):
            if not isinstance(item.get(key), str):
                raise fail(f"reformat_physical_exam[{i}].{key}", "missing or not text")
        findings.append(Finding(exam_name=item["exam_name"].strip(), exam_results=item["exam_results"].strip()))
    events_raw = record.get("events")
    if events_raw is None:
        raise fail("events", "missing")
    if not isinstance(events_raw, list):
        raise fail("events", f"expected a list, got {type(events_raw).__name__}")
    events = [_event(i, ev, fail, catalogue) for i, ev in enumerate(events_raw)]
    if not events:
        raise fail("events", "no exam events: nothing to simulate or score")
    events = _by_time(events)
    key = list(dict.fromkeys(catalogue.exams[e.exam].credit if e.exam else e.label for e in events))
    disease = catalogue.match_disease(diagnosis)
    patient = note_id.split("-", 1)[0] if re.match(r"^\d+-", note_id) else note_id
    sex = _sex(text)
    return Case(case_id=note_id, patient_id=patient, split=assign_split(patient, options.seed, options.test_fraction),
                source="diaggym", profile=profile_from_note(text, findings), sex=sex, physical_exam=findings,
                diagnosis=diagnosis, icd10=disease.code if disease else None, key_exams=key[: options.max_key_exams],
                events=events, metadata={"discharge_diagnosis": diagnosis_raw.strip(), "file": path.name})


def _text_field(record: dict, key: str, fail) -> str:
    value = record.get(key)
    if value is None:
        raise fail(key, "missing")
    if not isinstance(value, str):
        raise fail(key, f"expected text, got {type(value).__name__}")
    if not value.strip():
        raise fail(key, "empty")
    return value


def _event(i: int, ev: Any, fail, catalogue: Catalogue) -> ExamEvent:
    where = f"events[{i}]"
    if not isinstance(ev, dict):
        raise fail(where, f"expected an object, got {type(ev).__name__}")
    when = ev.get("time")
    if not isinstance(when, str | int | float) or isinstance(when, bool) or str(when).strip() == "":
        raise fail(f"{where}.time", "missing or not a time")
    source = ev.get("source")
    if not isinstance(source, str) or source.strip().lower() not in SOURCES:
        raise fail(f"{where}.source", f"{source!r} is not one of {', '.join(SOURCES)}")
    data = ev.get("data")
    if not isinstance(data, dict):
        raise fail(f"{where}.data", "missing or not an object with label and lab_data")
    label = data.get("label")
    if not isinstance(label, str) or not label.strip():
        raise fail(f"{where}.data.label", "missing or empty")
    result = data.get("lab_data")
    if result is None or isinstance(result, dict | list | bool):
        raise fail(f"{where}.data.lab_data", "missing or not text")
    exam = catalogue.exam(label)
    return ExamEvent(time=str(when).strip(), source=source.strip().lower(), label=label.strip(),
                     exam=exam.name if exam else None, result=str(result).strip())


def _by_time(events: list[ExamEvent]) -> list[ExamEvent]:
    """Sorted by time when every time parses (stable: equal times keep the record's order), else as recorded."""
    try:
        keys = [datetime.fromisoformat(e.time) for e in events]
    except ValueError:
        return events
    return [e for _, _, e in sorted(zip(keys, range(len(events)), events, strict=True))]


def primary_diagnosis(text: str) -> str:
    """The first line of a discharge diagnosis that is not a header ("Primary:", "Secondary diagnoses:")."""
    for line in text.splitlines():
        line = re.sub(r"^[\s\-*•#\d.)]+", "", line).strip()
        head, sep, rest = line.partition(":")
        if sep and _DIAGNOSIS_HEADER.match(head + ":") and rest.strip():
            line = rest.strip()
        if line and not _DIAGNOSIS_HEADER.match(line):
            return line
    return ""


def profile_from_note(text: str, findings: list[Finding]) -> str:
    """The note without the sections that tell the outcome, then the physical exam."""
    kept, drop = [], False
    position = 0
    for m in _HEADER.finditer(text):
        header = normalize(m.group("h"))
        if not any(header == k or header.startswith(k + " ") or header == k.replace(" ", "")
                   for k in KNOWN_SECTIONS):
            continue
        if not drop:
            kept.append(text[position:m.start()])
        drop = any(header == k or header.startswith(k + " ") or header.startswith(k) for k in DROP_SECTIONS)
        position = m.start()
    if not drop:
        kept.append(text[position:])
    note = re.sub(r"\n{3,}", "\n\n", "".join(kept)).strip()
    exam = "\n".join(f"  {f.exam_name}: {f.exam_results}" for f in findings)
    return f"{note}\n\nPhysical Examination:\n{exam}" if exam else note


def _sex(text: str) -> str | None:
    m = re.search(r"\bSex:\s*([MF])\b", text)
    return m.group(1) if m else None
