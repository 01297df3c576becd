"""Confirm generated answers by running each task's reference code in the sandbox.

Reference programs run in batches: one sandbox execution runs a chunk of them, each with fresh globals and its
own captured stdout, so that confirming 100,000 tasks costs hundreds of interpreter starts, not 100,000.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel

from components.sandbox.protocol import Sandbox
from components.tasks.checkers import check_value
from components.tasks.record import AnswerType, Task

_BATCH_RUNNER = r'''
import contextlib, io, json, os
_programs = json.loads({payload!r})
_home = os.getcwd()
_out = []
for _src in _programs:
    _buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(_buf):
            exec(compile(_src, "<reference>", "exec"), {{"__name__": "__main__"}})
        _lines = _buf.getvalue().strip().splitlines()
        _out.append({{"ok": True, "value": json.loads(_lines[-1]) if _lines else None}})
    except BaseException as _exc:  # a failing reference must not stop the batch
        _out.append({{"ok": False, "error": f"{{type(_exc).__name__}}: {{_exc}}"[:300]}})
    finally:
        os.chdir(_home)
print("\n" + json.dumps(_out))
'''


class Confirmation(BaseModel):
    task_id: str
    confirmed: bool
    # why not: "mismatch" (the sandbox's answer fails the checker), "reference_failed", "sandbox_failed"
    kind: str = "confirmed"
    reason: str


def batch_program(sources: Sequence[str]) -> str:
    return _BATCH_RUNNER.format(payload=json.dumps(list(sources)))


def confirm_tasks(tasks: Sequence[Task], sandbox: Sandbox) -> list[Confirmation]:
    """Run the reference code of `tasks` (which must all have one) in one sandbox execution."""
    missing = [t.task_id for t in tasks if not t.reference_code]
    if missing:
        raise ValueError(f"tasks without reference_code cannot be confirmed: {missing[:3]}")
    result = sandbox.exec(batch_program([t.reference_code or "" for t in tasks]))
    if result.status != "ok" or result.truncated:
        why = f"batch run {result.status}{' (output truncated)' if result.truncated else ''}: {result.stderr[-300:]}"
        return [Confirmation(task_id=t.task_id, confirmed=False, kind="sandbox_failed", reason=why) for t in tasks]
    outcomes: list[dict[str, Any]] = json.loads(result.stdout.strip().splitlines()[-1])
    return [_judge(task, outcome) for task, outcome in zip(tasks, outcomes, strict=True)]


def _judge(task: Task, outcome: dict[str, Any]) -> Confirmation:
    if not outcome["ok"]:
        return Confirmation(task_id=task.task_id, confirmed=False, kind="reference_failed",
                            reason=f"reference code failed: {outcome['error']}")
    if task.answer_spec.type == AnswerType.CODE:
        raise ValueError(f"{task.task_id}: code tasks are confirmed by their tests, not by a printed answer")
    verdict = check_value(task.answer_spec, task.answer, outcome["value"])
    return Confirmation(task_id=task.task_id, confirmed=verdict.correct,
                        kind="confirmed" if verdict.correct else "mismatch", reason=verdict.reason)


def confirm_all(tasks: Sequence[Task], sandbox: Sandbox, chunk: int,
                on_chunk: Callable[[int], None] | None = None) -> list[Confirmation]:
    """Confirm every task, `chunk` tasks per sandbox execution."""
    confirmations: list[Confirmation] = []
    for start in range(0, len(tasks), chunk):
        part = tasks[start : start + chunk]
        confirmations.extend(confirm_tasks(part, sandbox))
        if on_chunk:
            on_chunk(len(part))
    return confirmations
