"""Answer checkers, one per answer type, written so that they cannot be fooled.

The published MedAgentGym checkers inflate scores: a ±5% check that is always true, substring matching that
accepts "10" for "1", any successful execution counted as correct, a missing answer counted as right.
Each checker here parses the submission strictly, refuses what is ambiguous, and says why in `reason`.

A number is a number with at most the unit asked for (`answer_forms`), inside the domain of its kind (a
probability in [0, 1], a p-value compared in relative terms, a count non-negative); a SQL result is a multiset
(or, where the query orders it, a list) of rows of typed cells; dates and gestational ages compare by value; a
timestamp matches any of its ISO forms. Codes are strings: the truth's JSON type decides how a list element or a
table cell compares, so a code of the truth ('0389', '4019') is matched by that text alone and a number by value.
`check_answer` reads the unit and kind from the task's prompt where its spec does not record them.

Every checker returns a verdict for any JSON value: a submission over `answer_forms.check_size`'s caps, a number
past float range or a value of the wrong shape is a wrong answer with its reason, never an exception.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from components.sandbox.protocol import Sandbox
from components.tasks import code_judge
from components.tasks.answer_forms import (
    CANONICAL_NUMBER,
    PLAIN_NUMBER,
    TRUTH_UNITS,
    UnitRule,
    Unparsable,
    asked_kind,
    asked_unit,
    check_size,
    datetime_form,
    finite,
    format_weeks_days,
    literal,
    parse_date,
    parse_number,
    parse_weeks_days,
    split_bare_list,
    string_form,
)
from components.tasks.record import AnswerSpec, AnswerType, Task, ValueKind


class CheckResult(BaseModel):
    correct: bool
    reason: str


def is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip()) or (isinstance(value, (list, tuple, dict)) and not value)


def _truth_number(truth: Any) -> float:
    """The ground truth as a number: it is trusted, so any known unit written after it is let through."""
    return parse_number(truth, TRUTH_UNITS)


def _domain_refusal(spec: AnswerSpec, x: float) -> CheckResult | None:
    """A refusal where the value lies outside what the spec's kind of number can be."""
    if spec.kind in (ValueKind.PROBABILITY, ValueKind.P_VALUE) and not 0.0 <= x <= 1.0:
        return CheckResult(correct=False, reason=f"{x:g} is not in [0, 1], as a {spec.kind.value.replace('_', '-')} is")
    if spec.kind == ValueKind.COUNT and (x < 0 or x != int(x)):
        return CheckResult(correct=False, reason=f"{x:g} is not a count (a non-negative integer)")
    return None


def _tolerance(spec: AnswerSpec, t: float) -> float:
    if spec.kind == ValueKind.P_VALUE:
        # relative only: an absolute window around a tiny p-value (7.5e-30) holds 0 and negative numbers
        return max(spec.rel_tol if spec.rel_tol is not None else 1e-3, 1e-9) * abs(t)
    # the tolerance is measured against the truth, never against the submission itself
    tol = max(spec.abs_tol or 0.0, (spec.rel_tol or 0.0) * abs(t))
    return tol if tol > 0.0 else 1e-9 * max(1.0, abs(t))  # exact up to float noise


def _check_numeric(spec: AnswerSpec, truth: Any, got: Any) -> CheckResult:
    x, t = parse_number(got, UnitRule.for_spec(spec.unit, spec.kind)), _truth_number(truth)
    if refusal := _domain_refusal(spec, x):
        return refusal
    if spec.lower is not None or spec.upper is not None:
        lo = spec.lower if spec.lower is not None else -math.inf
        hi = spec.upper if spec.upper is not None else math.inf
        ok = lo <= x <= hi
        return CheckResult(correct=ok, reason=f"{x:g} {'within' if ok else 'outside'} [{lo:g}, {hi:g}]")
    tol = _tolerance(spec, t)
    ok = abs(x - t) <= tol
    return CheckResult(correct=ok, reason=f"{x:g} vs {t:g}: |diff| {abs(x - t):.4g} {'<=' if ok else '>'} tol {tol:.4g}")


def _check_integer(spec: AnswerSpec, truth: Any, got: Any) -> CheckResult:
    x, t = parse_number(got, UnitRule.for_spec(spec.unit, spec.kind)), _truth_number(truth)
    if x != int(x):
        return CheckResult(correct=False, reason=f"{x:g} is not an integer")
    if refusal := _domain_refusal(spec, x):
        return refusal
    ok = int(x) == int(t)
    return CheckResult(correct=ok, reason=f"{int(x)} {'==' if ok else '!='} {int(t)}")


_TRUE = {"true", "yes", "y", "1", "1.0"}
_FALSE = {"false", "no", "n", "0", "0.0"}


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):  # 1.0 is as plain a True as 1
        return bool(value)
    if isinstance(value, list) and len(value) == 1:
        return parse_bool(value[0])
    if isinstance(value, str):
        word = value.strip().strip(".").lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
    raise Unparsable(f"expected true/false or yes/no, got {value!r}")


def _check_boolean(spec: AnswerSpec, truth: Any, got: Any) -> CheckResult:
    x, t = parse_bool(got), parse_bool(truth)
    return CheckResult(correct=x == t, reason=f"{x} {'==' if x == t else '!='} {t}")


def normalize_text(value: Any, case_sensitive: bool = False) -> str:
    text = " ".join(str(value).split())
    return text if case_sensitive else text.casefold()


def text_key(value: Any, case_sensitive: bool) -> str:
    """Text as compared: spaces collapsed, case folded unless the spec says otherwise, a timestamp in one ISO form."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str) and (stamp := datetime_form(value)) is not None:
        return stamp
    return normalize_text(value, case_sensitive)


def element_key(value: Any, case_sensitive: bool, texts: frozenset[str] = frozenset()) -> tuple[str, str]:
    """How one list or set element compares, as the truth's JSON type decides. Codes are strings: an element whose
    text is the text of one of the truth's strings (`texts`, as `text_key` writes them: '0389', '4019', a timestamp
    in any of its ISO forms) is that text, so that neither '389' nor 389 is '0389' and '4019.000' is not '4019'.
    Any other element that reads as a number is a number by value ("10" == 10.0), which only a number of the truth
    equals."""
    text = text_key(value, case_sensitive)
    if text in texts:
        return ("text", text)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number: float | None = value
    elif isinstance(value, str) and PLAIN_NUMBER.fullmatch(value.strip()):
        number = float(value)
    else:
        number = None
    if number is not None:
        try:
            return ("num", repr(round(finite(number), 6) + 0.0))
        except Unparsable:  # past float range: left as text, which no number of the truth equals
            pass
    return ("text", text)


def _element_keys(truth: list[Any], case_sensitive: bool) -> Callable[[Any], tuple[str, str]]:
    """The key of every element, the truth's own included: its strings are what an element may equal as text."""
    texts = frozenset(text_key(v, case_sensitive) for v in truth if isinstance(v, str))
    return lambda value: element_key(value, case_sensitive, texts)


def parse_collection(value: Any) -> list[Any]:
    """A list from a list, a JSON or Python list literal, numbers separated by commas, or a single scalar."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        text = value.strip()
        if text.startswith(("[", "(", "{")):
            parsed = literal(text)
            if isinstance(parsed, (list, tuple, set)):
                return list(parsed)
            raise Unparsable(f"could not parse {value!r} as a list")
        if (parts := split_bare_list(text)) is not None:  # '13, 14, 39': unambiguous without brackets
            return list(parts)
    if isinstance(value, (dict, set)):
        raise Unparsable(f"expected a list, got {type(value).__name__}")
    return [value]


def _check_set(spec: AnswerSpec, truth: Any, got: Any) -> CheckResult:
    # the truth is read as a submission is: a JSON list written as a string holds the same codes as the list
    items = parse_collection(truth)
    key = _element_keys(items, spec.case_sensitive)
    want = {key(v) for v in items}
    have = {key(v) for v in parse_collection(got)}
    missing, extra = sorted(want - have), sorted(have - want)
    if not missing and not extra:
        return CheckResult(correct=True, reason=f"same {len(want)} element(s)")
    return CheckResult(correct=False, reason=f"missing {[k[1] for k in missing[:5]]}, unexpected {[k[1] for k in extra[:5]]}")


def _check_list(spec: AnswerSpec, truth: Any, got: Any) -> CheckResult:
    items = parse_collection(truth)
    key = _element_keys(items, spec.case_sensitive)
    want = [key(v) for v in items]
    have = [key(v) for v in parse_collection(got)]
    if want == have:
        return CheckResult(correct=True, reason=f"same {len(want)} element(s) in order")
    if len(want) != len(have):
        return CheckResult(correct=False, reason=f"expected {len(want)} element(s), got {len(have)}")
    if Counter(want) == Counter(have):
        return CheckResult(correct=False, reason="right elements in the wrong order")
    first = next(i for i, (a, b) in enumerate(zip(want, have, strict=True)) if a != b)
    return CheckResult(correct=False, reason=f"element {first} differs: {have[first][1]!r} != {want[first][1]!r}")


def _check_form(form: str, truth: Any, got: Any) -> CheckResult:
    """A date or a weeks-and-days duration, compared by value whatever form each side is written in."""
    if form == "date":
        d, t = parse_date(got), parse_date(truth)
        return CheckResult(correct=d == t, reason=f"{d.isoformat()} {'==' if d == t else '!='} {t.isoformat()}")
    x, w = parse_weeks_days(got), parse_weeks_days(truth)
    return CheckResult(correct=x == w, reason=f"{format_weeks_days(*x)} {'==' if x == w else '!='} {format_weeks_days(*w)}")


def _check_string(spec: AnswerSpec, truth: Any, got: Any) -> CheckResult:
    if (form := string_form(truth)) is not None:
        return _check_form(form, truth, got)
    if isinstance(got, list) and len(got) == 1:
        got = got[0]
    if isinstance(got, (list, dict)):
        raise Unparsable(f"expected a string, got {type(got).__name__}")
    x, t = text_key(got, spec.case_sensitive), text_key(truth, spec.case_sensitive)
    # whole-string equality: "10" must not match "1" or "100"
    return CheckResult(correct=x == t, reason="equal" if x == t else f"{x[:60]!r} != {t[:60]!r}")


# ---------------------------------------------------------------- SQL results: rows of typed cells

def _is_null(cell: Any) -> bool:
    return cell is None or (isinstance(cell, str) and cell.strip() == "None")  # the release writes NULL as 'None'


def cell_text(cell: str | int | float, case_sensitive: bool) -> str:
    """A cell as text: trimmed, a timestamp in one ISO form ('2100-02-25T15:47:00' is '2100-02-25 15:47:00')."""
    text = cell.strip() if isinstance(cell, str) else str(cell)
    text = datetime_form(text) or text
    return text if case_sensitive else text.casefold()


def cell_key(cell: Any, case_sensitive: bool, texts: frozenset[str] = frozenset()) -> tuple[Any, ...]:
    """One comparable form per cell, as the truth's JSON type decides: NULL as itself, text exactly after trimming
    (a timestamp in any of its ISO forms), numbers by value.

    Codes are strings: a cell whose text is the text of one of the truth's string cells in its column (`texts`, as
    `cell_text` writes them) is that text, so that neither '389' nor 389 is '0389' and '4019.000' is not '4019'. Any
    other cell that reads as a number is a number, which only a number of the truth equals ('92' == 92).
    """
    if _is_null(cell):
        return ("null",)
    if isinstance(cell, bool):
        return ("bool", cell)
    if not isinstance(cell, (str, int, float)):
        raise Unparsable(f"a cell must be a number, a string or null, got {type(cell).__name__}")
    if (text := cell_text(cell, case_sensitive)) in texts:
        return ("text", text)
    if isinstance(cell, str) and CANONICAL_NUMBER.fullmatch(cell.strip()):
        cell = float(cell)
    if isinstance(cell, (int, float)):
        x = finite(cell)
        return ("num", int(x) if x == int(x) else round(x, 6))
    return ("text", text)


def column_texts(rows: list[list[Any]], case_sensitive: bool) -> list[frozenset[str]]:
    """Per column, the text of the truth's string cells: what a cell of that column may equal as text."""
    width = max(len(r) for r in rows)
    return [frozenset(cell_text(r[i], case_sensitive) for r in rows if i < len(r) and isinstance(r[i], str) and not _is_null(r[i]))
            for i in range(width)]


def truth_rows(truth: Any) -> list[list[Any]]:
    """The stored result: a list of rows (a flat list is one column)."""
    rows = list(truth) if isinstance(truth, (list, tuple)) else [truth]
    return [list(r) if isinstance(r, (list, tuple)) else [r] for r in rows]


def parse_rows(value: Any, width: int) -> list[list[Any]]:
    """Rows from rows, or from a flat list in row order (the release's own form; for one column, a plain list)."""
    items = parse_collection(value)
    nested = [isinstance(i, (list, tuple)) for i in items]
    if all(nested):
        rows = [list(i) for i in items]
    elif any(nested):
        raise Unparsable("a mix of rows and single values")
    elif len(items) % width:
        raise Unparsable(f"{len(items)} value(s) do not make rows of {width} column(s)")
    else:
        # a flat list is read row after row: ['urgent', 1] is one row, ['1', 'urgent'] is another one
        rows = [items[i:i + width] for i in range(0, len(items), width)]
    for row in rows:
        if len(row) != width:
            raise Unparsable(f"a row of {len(row)} value(s); the result has {width} column(s)")
    return rows


def _check_rows(spec: AnswerSpec, truth: Any, got: Any) -> CheckResult:
    want_rows = truth_rows(truth)
    width = len(want_rows[0])
    texts = column_texts(want_rows, spec.case_sensitive)

    def key(row: list[Any]) -> tuple[tuple[Any, ...], ...]:
        return tuple(cell_key(c, spec.case_sensitive, texts[i]) for i, c in enumerate(row))

    want = [key(r) for r in want_rows]
    have = [key(r) for r in parse_rows(got, width)]
    if spec.type == AnswerType.ORDERED_ROWS:
        if want == have:
            return CheckResult(correct=True, reason=f"same {len(want)} row(s) in order")
        if Counter(want) == Counter(have):
            return CheckResult(correct=False, reason="right rows in the wrong order")
    elif Counter(want) == Counter(have):
        return CheckResult(correct=True, reason=f"same {len(want)} row(s)")
    missing = [_shown(r) for r in (Counter(want) - Counter(have)).elements()][:3]
    extra = [_shown(r) for r in (Counter(have) - Counter(want)).elements()][:3]
    return CheckResult(correct=False, reason=f"{len(have)} row(s) for {len(want)}; missing {missing}, unexpected {extra}")


def _shown(row: tuple[tuple[Any, ...], ...]) -> list[Any]:
    return [None if key[0] == "null" else key[1] for key in row]


_CHECKERS: dict[AnswerType, Callable[[AnswerSpec, Any, Any], CheckResult]] = {
    AnswerType.NUMERIC: _check_numeric,
    AnswerType.INTEGER: _check_integer,
    AnswerType.BOOLEAN: _check_boolean,
    AnswerType.SET: _check_set,
    AnswerType.LIST: _check_list,
    AnswerType.STRING: _check_string,
    AnswerType.ROWS: _check_rows,
    AnswerType.ORDERED_ROWS: _check_rows,
}


def check_value(spec: AnswerSpec, truth: Any, submitted: Any) -> CheckResult:
    """Compare a submitted value with the truth under `spec` (every type but code)."""
    if is_missing(submitted):
        return CheckResult(correct=False, reason="no answer submitted")
    try:
        check_size(submitted)  # before any pattern reads it
        return _CHECKERS[spec.type](spec, truth, submitted)
    except Unparsable as exc:
        return CheckResult(correct=False, reason=f"unparsable answer: {exc}")


def spec_asked(task: Task) -> AnswerSpec:
    """The task's spec, with the unit and kind of number its prompt asks for where the spec does not record them.

    Generated calculator and statistics specs name neither, but their prompts do ('in terms of mL/min/1.73 m²',
    'Report the two-sided p-value', 'a fraction between 0 and 1 (not a percentage)').
    """
    spec = task.answer_spec
    if spec.type not in (AnswerType.NUMERIC, AnswerType.INTEGER):
        return spec
    update: dict[str, Any] = {}
    if spec.unit is None and (unit := asked_unit(task.prompt)) is not None:
        update["unit"] = unit
    if spec.kind is None and (kind := asked_kind(task.prompt)) is not None:
        update["kind"] = kind
    return spec.model_copy(update=update) if update else spec


_CALL_FAILURES = {"ArgumentsNotSent": "could not send its arguments to the submission",
                  "UnreadableReply": "got a reply that is no result"}


def check_code(spec: AnswerSpec, submitted: Any, sandbox: Sandbox, timeout_s: float = 30.0) -> CheckResult:
    """Run the submission under the judge (components/tasks/code_judge.py) and compare the plain values it reports.

    A traced task (BioCoder) passes when every call its program makes to the target, under every seed variant,
    returns, changes and prints what the reference's did; an assert-style task passes when its tests, run by the
    judge against proxies of the submission's functions, all hold.
    """
    if is_missing(submitted) or not isinstance(submitted, str):
        return CheckResult(correct=False, reason="no code submitted")
    traced = spec.expected_trace is not None and bool(spec.target)
    if not traced and spec.expected_output is not None:
        return CheckResult(correct=False, reason="this task file predates traced checking: import it again")
    try:
        if not traced:
            report = code_judge.run_judge(sandbox, {"mode": "calls", "code": submitted, "tests": spec.tests or ""},
                                          timeout_s)
            if report.get("passed") is True:
                return CheckResult(correct=True, reason="all tests passed")
            if report.get("call") is not None:
                why = _CALL_FAILURES.get(str(report.get("failed")), "failed")
                cause = f" ({report['cause']})" if report.get("cause") else ""
                return CheckResult(correct=False, reason=f"the tests' call of {report['call']} at line {report.get('line')} {why}{cause}")
            return CheckResult(correct=False, reason=f"a test failed ({report.get('failed')} at line {report.get('line')})")
        assert spec.expected_trace is not None and spec.target is not None
        runs = code_judge.trace(sandbox, spec.tests or "", spec.target, submitted, len(spec.expected_trace), timeout_s)
    except code_judge.JudgeError as exc:
        return CheckResult(correct=False, reason=str(exc))
    if len(runs) != len(spec.expected_trace):
        return CheckResult(correct=False, reason="the judge's report was unreadable")
    if not code_judge.complete(runs):
        return CheckResult(correct=False, reason="the program did not finish")
    for variant, (got, want) in enumerate(zip(runs, spec.expected_trace, strict=True)):
        if len(got) != len(want):
            return CheckResult(correct=False, reason=f"run {variant}: {len(got)} calls recorded, not {len(want)}")
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            if not code_judge.same(g, w):
                return CheckResult(correct=False, reason=f"run {variant}, call {i + 1}: a different result")
    return CheckResult(correct=True, reason="every call matched the reference")


def check_answer(task: Task, submitted: Any, *, sandbox: Sandbox | None = None) -> CheckResult:
    """Score one submission for one task."""
    if task.answer_spec.type == AnswerType.CODE:
        if sandbox is None:
            raise ValueError(f"task {task.task_id}: code answers are checked by running tests; pass a sandbox")
        return check_code(task.answer_spec, submitted, sandbox)
    return check_value(spec_asked(task), task.answer, submitted)
