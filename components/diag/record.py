"""The Case record: one patient admission as the diagnostic environment and the world models read it.

A case is what DiagGym builds from an EHR: a patient profile written as text (demographics, chief complaint,
history of present illness, past history, physical exam; never the diagnosis), the time-ordered exam events of the
admission (lab, microbiology, radiology) with their results as text, the discharge diagnosis (ICD-10 where it maps
to the catalogue) and the key exams a clinician orders first, against which exam F1 is scored. The generator
(components.diag.cohort) and the importer (components.diag.importer) both write it; `cases.jsonl` holds one per line.

Splits are by patient: every admission of a patient lands in the same split (`assign_split`): train, valid (what
every choice is read off: steps, checkpoints, what to register on) and test (read for what is registered).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from components.common.io import RecordError, iter_jsonl, write_jsonl
from components.diag.catalogue import normalize

SOURCES = ("lab", "microbiology", "radiology")
SPLITS = ("train", "valid", "test")


class ExamEvent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    time: str  # as recorded; the generator writes "YYYY-MM-DD HH:MM:SS"
    source: Literal["lab", "microbiology", "radiology"]
    label: str = Field(min_length=1)  # the exam's name as the record has it
    exam: str | None = None  # the catalogue exam it maps to (None: not in the catalogue)
    result: str  # as text: DiagGym's lab lines, a culture report, an imaging report


class Finding(BaseModel):
    """One physical exam entry, as DiagGym's `reformat_physical_exam` has them."""

    model_config = ConfigDict(extra="forbid")

    exam_name: str
    exam_results: str


class Case(BaseModel):
    model_config = ConfigDict(extra="forbid")

    case_id: str = Field(min_length=1)
    patient_id: str = Field(min_length=1)
    split: str = "train"
    source: Literal["synthetic", "diaggym"] = "synthetic"
    profile: str = Field(min_length=1)  # the initial inquiry's patient information; never names the diagnosis
    age: int | None = None
    sex: Literal["M", "F"] | None = None
    physical_exam: list[Finding] = Field(default_factory=list)
    diagnosis: str = Field(min_length=1)  # the primary discharge diagnosis
    icd10: str | None = None  # the catalogue disease's code, where the diagnosis maps to one
    key_exams: list[str] = Field(min_length=1)  # catalogue exam names (imported: labels where none matched)
    events: list[ExamEvent] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("key_exams")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        return list(dict.fromkeys(v))

    @property
    def task_id(self) -> str:
        """The case as the rollout engine names what it plays (components.rollout.jobs.Playable)."""
        return self.case_id

    @property
    def disease_key(self) -> str:
        """What the world models condition on: the ICD-10 code, else the normalized diagnosis text."""
        return self.icd10 or "dx:" + normalize(self.diagnosis)


def assign_split(patient_id: str, seed: int, test_fraction: float, valid_fraction: float = 0.0) -> str:
    """A patient's split: a hash of the seed and the patient id, so every admission of a patient shares it and a
    patient keeps its split when the cohort grows. Valid is carved out of train: adding it moves no test patient."""
    digest = hashlib.sha256(f"diag-split:{seed}:{patient_id}".encode()).hexdigest()
    u = int(digest[:12], 16) / 16**12
    return "test" if u < test_fraction else "valid" if u < test_fraction + valid_fraction else "train"


def save_cases(path: Path | str, cases: list[Case]) -> int:
    """Write cases.jsonl atomically (readers never see half a file)."""
    return write_jsonl(path, (c.model_dump(mode="json") for c in cases))


def load_cases(path: Path | str, split: str | None = None) -> list[Case]:
    """Read cases.jsonl; a bad row raises RecordError naming the file, the line and the field."""
    out: list[Case] = []
    for lineno, obj in iter_jsonl(path):
        try:
            case = Case.model_validate(obj)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise RecordError(path, lineno, ".".join(str(p) for p in err["loc"]) or None, err["msg"]) from None
        if split is None or case.split == split:
            out.append(case)
    return out
