"""The one Task record every stage reads: importers and generators write it, environments, rollouts and scoring read it."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from components.common.io import RecordError, iter_jsonl, write_jsonl


class AnswerType(StrEnum):
    NUMERIC = "numeric"  # float; tolerance or [lower, upper] interval
    INTEGER = "integer"  # exact integer
    BOOLEAN = "boolean"
    SET = "set"  # unordered collection, compared element-wise after normalisation
    LIST = "list"  # ordered collection
    STRING = "string"  # normalised string equality (dates and weeks-and-days durations compared by value)
    CODE = "code"  # a program checked by running tests in the sandbox
    ROWS = "rows"  # a SQL result: a multiset of rows of typed cells
    ORDERED_ROWS = "ordered_rows"  # a SQL result whose query orders its rows: compared as a list


class ValueKind(StrEnum):
    """What a number stands for, where that bounds it or changes how it is compared."""

    PROBABILITY = "probability"  # a probability or fraction: in [0, 1], never written as a percentage
    P_VALUE = "p_value"  # in [0, 1] and compared relative to the truth: an absolute window would let 0 pass
    COUNT = "count"  # a non-negative integer


class Domain(StrEnum):
    EHR = "ehr"
    CALCULATOR = "calculator"
    BIOSTAT = "biostat"
    BIOINFO = "bioinfo"


class AnswerSpec(BaseModel):
    """How a submitted answer is compared with the ground truth."""

    model_config = ConfigDict(extra="forbid")

    type: AnswerType
    rel_tol: float | None = Field(default=None, ge=0, description="relative tolerance for numeric answers")
    abs_tol: float | None = Field(default=None, ge=0, description="absolute tolerance for numeric answers")
    lower: float | None = None
    upper: float | None = None
    case_sensitive: bool = False
    # numeric answers: the unit the prompt asks for (a number may carry it); None: not recorded, so it is read
    # from the prompt where the prompt names one, else any common clinical unit is let through
    unit: str | None = None
    # numeric answers: what the number stands for (None: read from the prompt where it says, else unbounded)
    kind: ValueKind | None = None
    # code tasks: a test harness run with the submitted code; it raises on failure. The submission replaces
    # SUBMISSION_SLOT where the harness has one, else it runs before the harness.
    tests: str | None = None
    # code tasks checked by tracing (BioCoder): the function the harness calls, and every call the reference made
    # under each seed variant, as plain values (components/tasks/code_judge.py). Never shown to a policy.
    target: str | None = None
    expected_trace: list[list[dict[str, Any]]] | None = None
    # older task files: the reference program's stdout; such tasks must be imported again to be checked
    expected_output: str | None = None

    @model_validator(mode="after")
    def _interval_ordered(self) -> AnswerSpec:
        if self.lower is not None and self.upper is not None and self.lower > self.upper:
            raise ValueError(f"lower {self.lower} exceeds upper {self.upper}")
        if self.type == AnswerType.CODE and not self.tests:
            raise ValueError("a code answer needs tests to run")
        return self


SUBMISSION_SLOT = "<<insert solution here>>"  # BioCoder's marker, kept so its contexts work unchanged


class ContextFile(BaseModel):
    """A file the task's code reads; `path` is relative to the folder holding tasks.jsonl."""

    model_config = ConfigDict(extra="forbid")

    path: str
    kind: str  # csv, sqlite, fasta, json, txt

    @field_validator("path")
    @classmethod
    def _relative(cls, v: str) -> str:
        if v.startswith("/") or ".." in Path(v).parts:
            raise ValueError(f"context path must be relative and inside the task folder: {v!r}")
        return v


class Task(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task_id: str = Field(min_length=1)
    dataset: str = Field(min_length=1)
    category: str = Field(min_length=1)
    domain: Domain
    split: str = Field(min_length=1)
    prompt: str = Field(min_length=1)
    answer: Any
    answer_spec: AnswerSpec
    context_files: list[ContextFile] = Field(default_factory=list)
    reference_code: str | None = None  # prints the answer as JSON on its last line
    source: str = "generated"  # generated | medagentgym
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("answer")
    @classmethod
    def _not_missing(cls, v: Any) -> Any:
        if v is None or (isinstance(v, str) and not v.strip()) or (isinstance(v, (list, dict)) and not v):
            raise ValueError("ground-truth answer is empty")
        return v


def load_tasks(path: Path | str) -> list[Task]:
    """Read tasks.jsonl; a bad row raises RecordError naming the file, the line and the field."""
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for lineno, obj in iter_jsonl(path):
        try:
            task = Task.model_validate(obj)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or None
            raise RecordError(path, lineno, field, err["msg"]) from None
        if task.task_id in seen:
            raise RecordError(path, lineno, "task_id", f"duplicate of line {seen[task.task_id]}: {task.task_id!r}")
        seen[task.task_id] = lineno
        tasks.append(task)
    return tasks


def save_tasks(path: Path | str, tasks: list[Task]) -> int:
    return write_jsonl(path, (t.model_dump(mode="json", exclude_none=True) for t in tasks))
