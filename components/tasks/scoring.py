"""Score a file of answers against a task file: one verdict per task, then a summary.

A task with no answer line is scored wrong ("no answer submitted"): the denominator is the task file, never the
answers someone chose to submit. A task whose checking fails unexpectedly (a missing context file, a sandbox that
does not start) is scored wrong with the failure as its reason; the other tasks are still scored.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from components.common.io import RecordError, iter_jsonl, write_jsonl
from components.sandbox.protocol import Sandbox
from components.tasks.checkers import CheckResult, check_answer
from components.tasks.record import AnswerType, Task, load_tasks


class Verdict(BaseModel):
    task_id: str
    correct: bool
    reason: str


class GroupScore(BaseModel):
    n: int
    correct: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else 0.0


class ScoreSummary(BaseModel):
    total: GroupScore
    answered: int
    by_dataset: dict[str, GroupScore]
    by_category: dict[str, GroupScore]


def load_answers(path: Path, known: set[str]) -> dict[str, Any]:
    answers: dict[str, Any] = {}
    lines: dict[str, int] = {}
    for lineno, row in iter_jsonl(path):
        task_id = row.get("task_id")
        if not isinstance(task_id, str) or not task_id:
            raise RecordError(path, lineno, "task_id", "missing or not a string")
        if "answer" not in row:
            raise RecordError(path, lineno, "answer", f"missing for task {task_id!r} (use null for no answer)")
        if task_id not in known:
            raise RecordError(path, lineno, "task_id", f"{task_id!r} is not in the task file")
        if task_id in answers:
            raise RecordError(path, lineno, "task_id", f"{task_id!r} answered twice (first on line {lines[task_id]})")
        answers[task_id], lines[task_id] = row["answer"], lineno
    return answers


def score(tasks: list[Task], answers: dict[str, Any], task_root: Path,
          open_sandbox: Callable[[], Sandbox] | None = None) -> tuple[list[Verdict], ScoreSummary]:
    if open_sandbox is None and (code := next((t for t in tasks if t.answer_spec.type == AnswerType.CODE), None)):
        raise ValueError(f"task {code.task_id} is checked by running code: scoring needs a sandbox")
    verdicts = []
    for task in tasks:
        if task.task_id not in answers:
            result = CheckResult(correct=False, reason="no answer submitted")
        else:
            result = _check_one(task, answers[task.task_id], task_root, open_sandbox)
        verdicts.append(Verdict(task_id=task.task_id, correct=result.correct, reason=result.reason))
    return verdicts, summarize(tasks, verdicts, answered=len(answers))


def _check_one(task: Task, submitted: Any, task_root: Path, open_sandbox: Callable[[], Sandbox] | None) -> CheckResult:
    try:
        if task.answer_spec.type == AnswerType.CODE:
            assert open_sandbox is not None  # score() refuses code tasks without one
            return _check_code_task(task, submitted, task_root, open_sandbox)
        return check_answer(task, submitted)
    except Exception as exc:  # noqa: BLE001 - one line's failure is that line's verdict; the file is still scored
        return CheckResult(correct=False, reason=" ".join(f"checking failed: {type(exc).__name__}: {exc}".split())[:500])


def _check_code_task(task: Task, submitted: Any, task_root: Path, open_sandbox: Callable[[], Sandbox]) -> CheckResult:
    sandbox = open_sandbox()
    try:
        for f in task.context_files:
            sandbox.upload_file(task_root / f.path, f.path)
        return check_answer(task, submitted, sandbox=sandbox)
    finally:
        sandbox.close()


def summarize(tasks: list[Task], verdicts: list[Verdict], answered: int) -> ScoreSummary:
    by_dataset: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    by_category: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for task, v in zip(tasks, verdicts, strict=True):
        for group in (by_dataset[task.dataset], by_category[task.category]):
            group[0] += 1
            group[1] += v.correct

    def groups(d: dict[str, list[int]]) -> dict[str, GroupScore]:
        return {k: GroupScore(n=n, correct=c) for k, (n, c) in sorted(d.items())}

    return ScoreSummary(total=GroupScore(n=len(verdicts), correct=sum(v.correct for v in verdicts)),
                        answered=answered, by_dataset=groups(by_dataset), by_category=groups(by_category))


def score_files(tasks_path: Path, answers_path: Path, out_path: Path,
                open_sandbox: Callable[[], Sandbox] | None = None) -> ScoreSummary:
    tasks = load_tasks(tasks_path)
    answers = load_answers(answers_path, {t.task_id for t in tasks})
    verdicts, summary = score(tasks, answers, tasks_path.parent, open_sandbox)
    write_jsonl(out_path, [*(v.model_dump() for v in verdicts), {"summary": summary.model_dump(mode="json")}])
    return summary
