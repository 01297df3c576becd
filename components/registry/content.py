"""Content hashes: which task a task id stood for when it was evaluated, so that only the same tasks are paired.

A coding task's hash covers what decides its verdict: the prompt, the answer, the answer spec (checking rule,
tolerances, tests) and the bytes of every context file (by its path relative to the task file's folder, as the
agent sees it). A DiagGym case's hash covers what the agent and the grader read: the patient profile, physical
exam, recorded exam events, diagnosis and key exams; not its ids, split or free-form metadata (an importer's file
name), which change no score. Fields left at their defaults are not hashed, so a field added to the schema later
does not change every hash.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from components.diag.record import Case
    from components.tasks.record import Task

_CHUNK = 1 << 20


def _canonical(body: Any) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    if path.is_dir():  # a folder of files: each by its relative path and bytes
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            h.update(str(f.relative_to(path)).encode() + b"\0" + _file_digest(f).encode() + b"\0")
        return h.hexdigest()
    with open(path, "rb") as fh:
        while block := fh.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def task_hashes(tasks: Iterable[Task], root: Path) -> dict[str, str]:
    """Per task id, the sha256 of its content; `root` is the folder of the task file (context paths are relative
    to it). A context file shared by many tasks (an EHR database) is read once."""
    files: dict[str, str] = {}
    out: dict[str, str] = {}
    for task in tasks:
        h = hashlib.sha256(_canonical({"prompt": task.prompt, "answer": task.answer,
                                       "answer_spec": task.answer_spec.model_dump(mode="json", exclude_defaults=True)}))
        for cf in sorted(task.context_files, key=lambda c: c.path):
            if cf.path not in files:
                path = root / cf.path
                if not path.exists():
                    raise FileNotFoundError(f"task {task.task_id}: context file {cf.path} not found under {root}")
                files[cf.path] = _file_digest(path)
            h.update(b"\0" + cf.path.encode() + b"\0" + files[cf.path].encode())
        out[task.task_id] = h.hexdigest()
    return out


def case_hashes(cases: Iterable[Case]) -> dict[str, str]:
    """Per case id, the sha256 of what the diagnostic agent and its grader read of the case."""
    skip = {"case_id", "patient_id", "split", "metadata"}
    return {c.case_id: hashlib.sha256(_canonical(c.model_dump(mode="json", exclude=skip, exclude_defaults=True)))
            .hexdigest() for c in cases}


def tasks_digest(hashes: Mapping[str, str], tasks: Iterable[str]) -> str:
    """One digest of a set of tasks and their contents: what looks at one reference are counted on."""
    h = hashlib.sha256()
    for t in sorted(tasks):
        h.update(t.encode() + b"\0" + hashes[t].encode() + b"\n")
    return h.hexdigest()
