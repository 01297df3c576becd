"""Checking code answers: the judge program (judge_program.py) runs in the sandbox and reports plain values; the host
compares them with what it holds. See judge_program.py for why nothing the submission does can fake a pass.
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path
from typing import Any

from components.sandbox.protocol import ExecResult, Sandbox
from components.tasks.record import SUBMISSION_SLOT

JUDGE_SOURCE = (Path(__file__).with_name("judge_program.py")).read_text()
DEFAULT_VARIANTS = 3
# Bodies that solve nothing; a task whose recorded behaviour one of them reproduces cannot tell solving from not.
TRIVIAL_RETURNS: tuple[Any, ...] = (None, False, True, 0, 1, "", [])
REL_TOL, ABS_TOL = 1e-6, 1e-9


class JudgeError(ValueError):
    """The judge's report could not be read (the run failed before the judge could report)."""


def judge_program(config: dict[str, Any]) -> str:
    return f"{JUDGE_SOURCE}\n\nmain(json.loads({json.dumps(config)!r}))\n"


def run_judge(sandbox: Sandbox, config: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    result: ExecResult = sandbox.exec(judge_program({**config, "timeout_s": timeout_s}), timeout_s=timeout_s + 5)
    if result.status != "ok":
        raise JudgeError(f"the check did not complete ({result.status})")
    try:
        report = json.loads(result.stdout)
    except ValueError as exc:
        raise JudgeError("the judge's report was unreadable") from exc
    if not isinstance(report, dict):
        raise JudgeError("the judge's report was unreadable")
    return report


def insert_submission(harness: str, code: str) -> str:
    """Put `code` where the harness has SUBMISSION_SLOT, indented as the slot is (BioCoder puts methods in classes)."""
    at = harness.index(SUBMISSION_SLOT)
    line_start = harness.rfind("\n", 0, at) + 1
    indent = harness[line_start:at]
    if indent.strip():  # the slot sits after other text on its line: insert verbatim
        return harness.replace(SUBMISSION_SLOT, code, 1)
    body = textwrap.indent(textwrap.dedent(code), indent).lstrip(" \t") if indent else code
    return harness[:at] + body + harness[at + len(SUBMISSION_SLOT):]


def with_recorder(code: str, target: str) -> str:
    """The submission followed by the line that wraps its target (at the submission's own indentation)."""
    return f"{textwrap.dedent(code).rstrip()}\n{target} = _medgym_record({target})\n"


def trace(sandbox: Sandbox, harness: str, target: str, code: str, variants: int = DEFAULT_VARIANTS,
          timeout_s: float = 60.0) -> list[list[dict[str, Any]]]:
    """Every call `harness` makes to `target` with `code` in its slot, per seed variant, as plain values."""
    program = insert_submission(harness, with_recorder(code, target))
    runs = run_judge(sandbox, {"mode": "trace", "program": program, "variants": variants}, timeout_s).get("runs")
    if not isinstance(runs, list):
        raise JudgeError("the judge's report was unreadable")
    return runs


def same(a: Any, b: Any) -> bool:  # noqa: ANN401 - JSON values
    """Plain values equal, numbers within a tight tolerance (algebraically equal code may round differently)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, str) and isinstance(b, str):
        return a.rstrip() == b.rstrip()
    return type(a) is type(b) and a == b


def calls_recorded(runs: list[list[dict]]) -> int:
    return sum(1 for run in runs for rec in run if "args" in rec)


def complete(runs: list[list[dict]]) -> bool:
    return all(not any(rec.get("incomplete") for rec in run) for run in runs)


def trivial_match(runs: list[list[dict]]) -> Any | None:  # noqa: ANN401
    """A constant body that reproduces every recorded call (returns it, changes nothing, prints nothing), if any."""
    calls = [rec for run in runs for rec in run if "args" in rec]
    if not calls or any("more" in rec for run in runs for rec in run):
        return None
    for const in TRIVIAL_RETURNS:
        if all("raises" not in rec and same(rec.get("returns"), const) and same(rec["args"], rec["args_after"])
               and rec.get("self") == rec.get("self_after") and not rec.get("stdout") for rec in calls):
            return const if const is not None else "None"
    return None
