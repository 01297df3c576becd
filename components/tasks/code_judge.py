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
REL_TOL, ABS_TOL = 1e-6, 1e-9


class JudgeError(ValueError):
    """The judge's report could not be read (the run failed before the judge could report)."""


def judge_program(config: dict[str, Any]) -> str:
    if config.get("mode") == "calls":  # the submission's interpreter starts from this source alone, never the tests
        config = {**config, "server": JUDGE_SOURCE}
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


def _calls(runs: list[list[dict]]) -> list[dict]:
    return [rec for run in runs for rec in run if "args" in rec]


def calls_recorded(runs: list[list[dict]]) -> int:
    return len(_calls(runs))


def complete(runs: list[list[dict]]) -> bool:
    return all(not any(rec.get("incomplete") for rec in run) for run in runs)


def distinct_inputs(runs: list[list[dict]]) -> int:
    """How many different inputs (the object, the arguments) the recorded calls give the function."""
    return len({json.dumps([rec.get("self"), rec["args"], rec.get("kwargs")], sort_keys=True) for rec in _calls(runs)})


def _inputs(rec: dict) -> dict[str, Any]:
    """What a body could hand back without computing anything: each argument, the object and its attributes."""
    found: dict[str, Any] = {f"argument {i + 1}": v for i, v in enumerate(rec["args"])}
    kwargs = rec.get("kwargs")
    if isinstance(kwargs, dict) and isinstance(kwargs.get("dict"), list):
        found.update({f"argument {k!r}": v for k, v in kwargs["dict"]})
    own = rec.get("self")
    if own is not None:
        found["self"] = own
        attrs = own.get("attrs") if isinstance(own, dict) else None
        if isinstance(attrs, dict) and isinstance(attrs.get("dict"), list):
            found.update({f"self.{k}": v for k, v in attrs["dict"]})
    return found


def cheap_guess(runs: list[list[dict]]) -> str | None:
    """A body that ignores the task yet reproduces every recorded call, if one does: `return` one fixed value (a
    module constant, a literal of the harness, None), `raise` one exception, or `return` one of its own inputs."""
    calls = _calls(runs)
    if not calls or any("more" in rec for run in runs for rec in run):
        return None
    if any(rec.get("stdout") or not same(rec["args"], rec.get("args_after")) or rec.get("self") != rec.get("self_after")
           for rec in calls):
        return None  # the reference prints or changes its inputs: a body that only returns cannot match
    first = calls[0]
    if "raises" in first:
        return f"raise {first['raises']}" if all(rec.get("raises") == first["raises"] for rec in calls) else None
    if any("raises" in rec for rec in calls):
        return None
    if all(same(rec.get("returns"), first.get("returns")) for rec in calls):
        return "return one fixed value"
    for name in _inputs(first):
        if all(name in (given := _inputs(rec)) and same(rec.get("returns"), given[name]) for rec in calls):
            return f"return {name}"
    return None
