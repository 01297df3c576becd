"""Answer checkers, one per answer type, written so that they cannot be fooled.

The published MedAgentGym checkers inflate scores: a ±5% check that is always true, substring matching that
accepts "10" for "1", any successful execution counted as correct, a missing answer counted as right.
Each checker here parses the submission strictly, refuses what is ambiguous, and says why in `reason`.
"""

from __future__ import annotations

import ast
import json
import math
import re
import secrets
import textwrap
from collections import Counter
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from components.sandbox.protocol import Sandbox
from components.tasks.record import SUBMISSION_SLOT, AnswerSpec, AnswerType, Task


class CheckResult(BaseModel):
    correct: bool
    reason: str


class _Unparsable(ValueError):
    pass


_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip()) or (isinstance(value, (list, tuple, dict)) and not value)


def parse_number(value: Any) -> float:
    """A finite number from a number or from a string holding exactly one number (units around it are allowed)."""
    if isinstance(value, bool):  # bool is an int subclass: True must not pass as 1
        raise _Unparsable("a boolean is not a number")
    if isinstance(value, (int, float)):
        x = float(value)
    elif isinstance(value, str):
        text = value.replace(",", "") if re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?", value.strip()) else value
        found = _NUMBER.findall(text)
        if len(found) != 1:
            raise _Unparsable(f"expected exactly one number in {value!r}, found {len(found)}")
        x = float(found[0])
    elif isinstance(value, list) and len(value) == 1:
        return parse_number(value[0])
    else:
        raise _Unparsable(f"expected a number, got {type(value).__name__}")
    if not math.isfinite(x):
        raise _Unparsable(f"{value!r} is not finite")
    return x


def _check_numeric(spec: AnswerSpec, truth: Any, got: Any) -> CheckResult:
    x, t = parse_number(got), parse_number(truth)
    if spec.lower is not None or spec.upper is not None:
        lo = spec.lower if spec.lower is not None else -math.inf
        hi = spec.upper if spec.upper is not None else math.inf
        ok = lo <= x <= hi
        return CheckResult(correct=ok, reason=f"{x:g} {'within' if ok else 'outside'} [{lo:g}, {hi:g}]")
    # the tolerance is measured against the truth, never against the submission itself
    tol = max(spec.abs_tol or 0.0, (spec.rel_tol or 0.0) * abs(t))
    if tol == 0.0:
        tol = 1e-9 * max(1.0, abs(t))  # exact up to float noise
    ok = abs(x - t) <= tol
    return CheckResult(correct=ok, reason=f"{x:g} vs {t:g}: |diff| {abs(x - t):.4g} {'<=' if ok else '>'} tol {tol:.4g}")


def _check_integer(spec: AnswerSpec, truth: Any, got: Any) -> CheckResult:
    x, t = parse_number(got), parse_number(truth)
    if x != int(x):
        return CheckResult(correct=False, reason=f"{x:g} is not an integer")
    ok = int(x) == int(t)
    return CheckResult(correct=ok, reason=f"{int(x)} {'==' if ok else '!='} {int(t)}")


_TRUE = {"true", "yes", "y", "1"}
_FALSE = {"false", "no", "n", "0"}


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, list) and len(value) == 1:
        return parse_bool(value[0])
    if isinstance(value, str):
        word = value.strip().strip(".").lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
    raise _Unparsable(f"expected true/false or yes/no, got {value!r}")


def _check_boolean(spec: AnswerSpec, truth: Any, got: Any) -> CheckResult:
    x, t = parse_bool(got), parse_bool(truth)
    return CheckResult(correct=x == t, reason=f"{x} {'==' if x == t else '!='} {t}")


def normalize_text(value: Any, case_sensitive: bool = False) -> str:
    text = " ".join(str(value).split())
    return text if case_sensitive else text.casefold()


def _canonical_element(value: Any, case_sensitive: bool) -> str:
    """One comparable form for list/set elements: numbers by value ("10" == 10.0), text normalised."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)) or (isinstance(value, str) and re.fullmatch(r"\s*" + _NUMBER.pattern + r"\s*", value)):
        x = float(value)
        if math.isfinite(x):
            return repr(round(x, 6) + 0.0)
    return normalize_text(value, case_sensitive)


def parse_collection(value: Any) -> list[Any]:
    """A list from a list, a JSON or Python list literal, or a single scalar (a one-element answer)."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        text = value.strip()
        if text.startswith(("[", "(", "{")):
            for parse in (json.loads, ast.literal_eval):
                try:
                    parsed = parse(text)
                except (ValueError, SyntaxError):
                    continue
                if isinstance(parsed, (list, tuple, set)):
                    return list(parsed)
            raise _Unparsable(f"could not parse {value!r} as a list")
    if isinstance(value, (dict, set)):
        raise _Unparsable(f"expected a list, got {type(value).__name__}")
    return [value]


def _check_set(spec: AnswerSpec, truth: Any, got: Any) -> CheckResult:
    want = {_canonical_element(v, spec.case_sensitive) for v in parse_collection(truth)}
    have = {_canonical_element(v, spec.case_sensitive) for v in parse_collection(got)}
    missing, extra = sorted(want - have), sorted(have - want)
    if not missing and not extra:
        return CheckResult(correct=True, reason=f"same {len(want)} element(s)")
    return CheckResult(correct=False, reason=f"missing {missing[:5]}, unexpected {extra[:5]}")


def _check_list(spec: AnswerSpec, truth: Any, got: Any) -> CheckResult:
    want = [_canonical_element(v, spec.case_sensitive) for v in parse_collection(truth)]
    have = [_canonical_element(v, spec.case_sensitive) for v in parse_collection(got)]
    if want == have:
        return CheckResult(correct=True, reason=f"same {len(want)} element(s) in order")
    if len(want) != len(have):
        return CheckResult(correct=False, reason=f"expected {len(want)} element(s), got {len(have)}")
    if Counter(want) == Counter(have):
        return CheckResult(correct=False, reason="right elements in the wrong order")
    first = next(i for i, (a, b) in enumerate(zip(want, have, strict=True)) if a != b)
    return CheckResult(correct=False, reason=f"element {first} differs: {have[first]!r} != {want[first]!r}")


def _check_string(spec: AnswerSpec, truth: Any, got: Any) -> CheckResult:
    if isinstance(got, list) and len(got) == 1:
        got = got[0]
    if isinstance(got, (list, dict)):
        raise _Unparsable(f"expected a string, got {type(got).__name__}")
    x, t = normalize_text(got, spec.case_sensitive), normalize_text(truth, spec.case_sensitive)
    # whole-string equality: "10" must not match "1" or "100"
    return CheckResult(correct=x == t, reason="equal" if x == t else f"{x[:60]!r} != {t[:60]!r}")


_CHECKERS: dict[AnswerType, Callable[[AnswerSpec, Any, Any], CheckResult]] = {
    AnswerType.NUMERIC: _check_numeric,
    AnswerType.INTEGER: _check_integer,
    AnswerType.BOOLEAN: _check_boolean,
    AnswerType.SET: _check_set,
    AnswerType.LIST: _check_list,
    AnswerType.STRING: _check_string,
}


def check_value(spec: AnswerSpec, truth: Any, submitted: Any) -> CheckResult:
    """Compare a submitted value with the truth under `spec` (every type but code)."""
    if is_missing(submitted):
        return CheckResult(correct=False, reason="no answer submitted")
    try:
        return _CHECKERS[spec.type](spec, truth, submitted)
    except _Unparsable as exc:
        return CheckResult(correct=False, reason=f"unparsable answer: {exc}")


def insert_submission(harness: str, code: str) -> str:
    """Put `code` where the harness has SUBMISSION_SLOT, indented as the slot is (BioCoder puts methods in classes)."""
    at = harness.index(SUBMISSION_SLOT)
    line_start = harness.rfind("\n", 0, at) + 1
    indent = harness[line_start:at]
    if indent.strip():  # the slot sits after other text on its line: insert verbatim
        return harness.replace(SUBMISSION_SLOT, code, 1)
    body = textwrap.indent(textwrap.dedent(code), indent).lstrip(" \t") if indent else code
    return harness[:at] + body + harness[at + len(SUBMISSION_SLOT):]


def code_test_program(submitted_code: str, tests: str, token: str) -> str:
    """The submission inside (or before) the tests, then a pass marker the submission cannot know in advance.

    The marker is printed only after every test statement ran, so a submission that exits early, raises, or
    merely runs without error is not counted as passing.
    """
    if SUBMISSION_SLOT in tests:
        program = insert_submission(tests, submitted_code)
    else:
        program = f"{submitted_code}\n\n# ---- tests ----\n{tests}"
    return f"{program}\n\nprint({token!r})\n"


def check_code(spec: AnswerSpec, submitted: Any, sandbox: Sandbox) -> CheckResult:
    if is_missing(submitted) or not isinstance(submitted, str):
        return CheckResult(correct=False, reason="no code submitted")
    token = f"MEDGYM-TESTS-PASSED-{secrets.token_hex(8)}"
    result = sandbox.exec(code_test_program(submitted, spec.tests or "", token))
    if result.status != "ok":
        tail = (result.stderr.strip().splitlines() or [result.status])[-1]
        return CheckResult(correct=False, reason=f"tests did not pass ({result.status}): {tail[:200]}")
    lines = result.stdout.splitlines()
    if token not in lines:
        return CheckResult(correct=False, reason="the program exited cleanly but the tests never completed")
    if spec.expected_output is not None:
        printed = "\n".join(lines[: lines.index(token)]).rstrip()
        if printed != spec.expected_output.rstrip():
            return CheckResult(correct=False, reason="the program ran but printed something other than expected")
    return CheckResult(correct=True, reason="all tests passed")


def check_answer(task: Task, submitted: Any, *, sandbox: Sandbox | None = None) -> CheckResult:
    """Score one submission for one task."""
    if task.answer_spec.type == AnswerType.CODE:
        if sandbox is None:
            raise ValueError(f"task {task.task_id}: code answers are checked by running tests; pass a sandbox")
        return check_code(task.answer_spec, submitted, sandbox)
    return check_value(task.answer_spec, task.answer, submitted)
