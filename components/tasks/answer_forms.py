"""How a submitted answer is read before it is compared: numbers (with at most the unit the task asks for),
dates, weeks-and-days durations, lists written without brackets, and what a prompt asks for.

A reward that accepts text around a number ('not 39.576', 'less than 40') pays for not answering, and one that
refuses a true answer in an ordinary form ('22.295 mL/min/1.73 m²', '7/26/2014') teaches the model to be wrong.
So each reader accepts the forms a careful answer takes and refuses everything else with a reason.

The host reads a submission only after `check_size` has bounded it (the caps below), and every pattern here
is linear in what it reads: a policy trained on rewards must not be able to stall the grader with one answer.

Entry points: `check_size(value)`, `parse_number(value, rule)`, `finite(value)`, `UnitRule.for_spec(unit, kind)`,
`parse_date(value)`, `datetime_form(text)`, `parse_weeks_days(value)`, `string_form(truth)`, `split_bare_list(text)`,
`asked_unit(prompt)`, `asked_kind(prompt)`.
"""

from __future__ import annotations

import ast
import datetime
import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from components.tasks.record import ValueKind


class Unparsable(ValueError):
    """The submission is not in a form the checker reads; the message says what is wrong with it."""


# ---------------------------------------------------------------- size

# The most of a submission the host reads. A true answer is far smaller (the largest SQL result of the release's
# sample is 57 characters of JSON); these only bound the work a hostile one can cause.
MAX_ANSWER_CHARS = 65_536  # characters of text in the whole answer: strings, dict keys and the digits of integers
MAX_ANSWER_VALUES = 10_000  # values held by its lists, tuples, sets and dicts, nested ones included
MAX_ANSWER_DEPTH = 16  # containers inside containers; a SQL result is two deep
MAX_INTEGER_DIGITS = 1_000  # far past any float (309 digits), and short of the 4,300 Python refuses to print


def _digits(n: int) -> int:
    """The number of decimal digits of `n`, within one, without printing it (str() of a huge int is quadratic)."""
    return int(abs(n).bit_length() * 0.30103) + 1


def check_size(value: Any) -> None:
    """Refuse (Unparsable) a value over the caps above; the walk stops at the first cap passed, so it is bounded
    by the caps and not by the value."""
    chars = values = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            chars += len(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            if (digits := _digits(item)) > MAX_INTEGER_DIGITS:
                raise Unparsable(f"an integer of about {digits} digits (at most {MAX_INTEGER_DIGITS} are read)")
            chars += digits
        elif isinstance(item, (list, tuple, set, frozenset, dict)):
            if depth >= MAX_ANSWER_DEPTH:
                raise Unparsable(f"values nested more than {MAX_ANSWER_DEPTH} deep")
            values += len(item)
            if values > MAX_ANSWER_VALUES:
                raise Unparsable(f"more than {MAX_ANSWER_VALUES} values")
            stack.extend((x, depth + 1) for x in ([*item.keys(), *item.values()] if isinstance(item, dict) else item))
        if chars > MAX_ANSWER_CHARS:
            raise Unparsable(f"more than {MAX_ANSWER_CHARS} characters")


# ---------------------------------------------------------------- units

# Units as a number's suffix may spell them, grouped by meaning; a group is matched after `unit_key` folding
# (case, spaces, '²' / '^2', 'µ'), so 'mL/min/1.73 m²', 'ml/min/1.73m2' and 'mL/min/1.73 m^2' are one unit.
_UNIT_GROUPS: tuple[frozenset[str], ...] = tuple(frozenset(g) for g in (
    {"ml/min/1.73m2"}, {"ml/min"}, {"kg/m2"}, {"m2"}, {"mmhg"},
    {"ms", "msec", "msecs", "millisecond", "milliseconds"},
    {"ml/hr", "ml/h", "ml/hour"}, {"ml", "cc", "milliliter", "milliliters"},
    {"l", "liter", "liters", "litre", "litres"},
    {"mg/dl"}, {"g/dl"}, {"g/l"}, {"mg/l"}, {"mmol/l"}, {"umol/l"}, {"meq/l"}, {"mosm/kg", "mosm/kgh2o"},
    {"mosm/l"}, {"iu/l", "u/l"}, {"ng/ml"}, {"pg/ml"}, {"mg"}, {"mcg", "ug"}, {"mmol"}, {"meq"},
    {"kg", "kgs", "kilogram", "kilograms"}, {"g", "gram", "grams"}, {"lb", "lbs", "pound", "pounds"},
    {"cm"}, {"mm"}, {"m", "meter", "meters", "metre", "metres"}, {"in", "inch", "inches"},
    {"bpm", "beats/min", "/min"}, {"breaths/min"},
    {"°c", "degc", "celsius"}, {"°f", "degf", "fahrenheit"},
    {"day", "days"}, {"week", "weeks"}, {"month", "months"}, {"year", "years"}, {"hour", "hours", "hr", "hrs"},
    {"min", "minute", "minutes"},
    {"point", "points", "pt", "pts"},
    {"nt", "bp", "nucleotide", "nucleotides"},
    {"$", "usd", "dollar", "dollars"},
    {"%", "percent"},
))
_GROUP_OF: dict[str, frozenset[str]] = {key: group for group in _UNIT_GROUPS for key in group}
_PERCENT = _GROUP_OF["%"]
# with no unit known, any common unit may follow the number, but not '%': where a fraction is asked, '0.6%'
# is a different number, and a task that wants a percentage says so in its prompt
_ANY_UNIT = frozenset(_GROUP_OF) - _PERCENT


_WHITESPACE = re.compile(r"\s+")


def unit_key(text: str) -> str:
    """One spelling per unit: no spaces, case folded, '²' and '^2' as '2', micro as 'u'."""
    t = text.strip().strip("()[]").strip().rstrip(".")
    for a, b in (("²", "2"), ("³", "3"), ("^", ""), ("µ", "u"), ("μ", "u"), ("·", ""), ("⋅", "")):
        t = t.replace(a, b)
    return _WHITESPACE.sub("", t).casefold()


@dataclass(frozen=True)
class UnitRule:
    """Which unit suffixes a number may carry; `asked` names the unit in reasons."""

    accepted: frozenset[str]
    asked: str | None = None

    @classmethod
    @lru_cache(maxsize=512)  # per numeric check; specs name few units
    def for_spec(cls, unit: str | None, kind: ValueKind | None) -> UnitRule:
        if kind in (ValueKind.PROBABILITY, ValueKind.P_VALUE):
            return cls(frozenset(), "a plain number between 0 and 1")
        if unit is None:
            return ANY_UNIT
        if not unit.strip():
            return cls(frozenset(), "a plain number")
        key = unit_key(unit)
        return cls(_GROUP_OF.get(key, frozenset({key})), unit)


ANY_UNIT = UnitRule(_ANY_UNIT)
TRUTH_UNITS = UnitRule(frozenset(_GROUP_OF))  # a stored truth may carry any known unit, '%' included


# ---------------------------------------------------------------- numbers

# signs a writer (or a word processor) uses for minus: U+2212 minus, hyphen, non-breaking hyphen, figure
# dash, en dash, em dash, small and full-width hyphen-minus, modifier minus
_DASHES = dict.fromkeys(map(ord, "\u2212\u2010\u2011\u2012\u2013\u2014\ufe63\uff0d\u02d7"), "-")
_SPACES = dict.fromkeys(map(ord, "\u00a0\u2007\u2009\u202f"), " ")
_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
_MANTISSA = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+"
_NUMBER_FORM = re.compile(
    r"(?P<cur>\$\s*)?(?P<sign>[-+])?(?P<cur2>\$)?(?P<mant>" + _MANTISSA + r")"
    r"(?:[eE](?P<exp>[-+]?\d+)"
    r"|\s*[x×*·]\s*10\s*(?:\^|\*\*)\s*\(?(?P<exp10>[-+]?\d+)\)?"
    r"|\s*[x×*·]\s*10(?P<sup>[⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+))?"
    r"(?P<rest>.*)",
    re.S,
)
_ANY_NUMBER = re.compile(r"\d")
_NEGATION = re.compile(r"\b(?:not|no|never|isn't|is not|non)\b", re.I)
_INEQUALITY = re.compile(r"[<>≤≥≦≧~≈±]|\b(?:less|more|greater|fewer|under|over|above|below|at least|at most|"
                         r"about|approx\w*|around|roughly|nearly|almost|up to|between|exceeds?)\b", re.I)
_RANGE = re.compile(r"^\s*(?:-|to\b|and\b|or\b|/)\s*[-+$]?\s*[\d.]", re.I)


def _normalise(text: str) -> str:
    # one space between words also keeps every pattern below linear on a submission of long blank runs
    text = " ".join(text.translate(_DASHES).translate(_SPACES).split())
    if text.endswith(".") and not text.endswith(".."):  # a closing full stop is punctuation, not text
        text = text[:-1].rstrip()
    return text


def _why_not_a_number(text: str) -> str:
    """The reason a text that does not start with a number is refused."""
    if not _ANY_NUMBER.search(text):
        return f"expected a number, got {text!r}"
    head = text[: _ANY_NUMBER.search(text).start()]  # type: ignore[union-attr]
    if _NEGATION.search(head):
        return f"a negation is not an answer: {text!r}"
    if _INEQUALITY.search(head):
        return f"an inequality or approximation is not an answer: {text!r}"
    return f"text before the number: {text!r}"


def _mantissa_value(m: re.Match[str]) -> float:
    exp = m["exp"] or m["exp10"] or (m["sup"].translate(_SUPERSCRIPT) if m["sup"] else None)
    # float() of the written form: exact where Python reads it, and inf (refused later) where it overflows
    x = float(m["mant"].replace(",", "") + (f"e{exp}" if exp is not None else ""))
    return -x if m["sign"] == "-" else x


def _check_suffix(rest: str, currency: bool, rule: UnitRule, text: str) -> None:
    """What follows the number: nothing, or one unit the rule accepts (a '$' before it counts as one)."""
    suffix = rest.strip()
    if not suffix:
        if currency and "$" not in rule.accepted:
            raise Unparsable(f"a currency sign, but the task asks for {rule.asked or 'a plain number'}: {text!r}")
        return
    key = unit_key(suffix)
    if currency:
        raise Unparsable(f"a currency sign and more text: {text!r}")
    if _RANGE.match(suffix):
        raise Unparsable(f"a range is not an answer: {text!r}")
    if key in rule.accepted:
        return
    if key in _PERCENT:
        raise Unparsable(f"a percent sign, but the task asks for {rule.asked or 'a plain number'}: {text!r}")
    if key in _GROUP_OF:
        raise Unparsable(f"unit {suffix!r} is not the unit asked ({rule.asked or 'none'}): {text!r}")
    if _ANY_NUMBER.search(suffix):
        raise Unparsable(f"expected exactly one number in {text!r}")
    if _NEGATION.search(suffix) or _INEQUALITY.search(suffix):
        raise Unparsable(f"a qualified number is not an answer: {text!r}")
    raise Unparsable(f"unexpected text after the number: {text!r}")


def parse_text_number(value: str, rule: UnitRule = ANY_UNIT) -> float:
    """A number written as text: optional sign, thousands separators, exponent, and at most one accepted unit."""
    text = _normalise(value)
    m = _NUMBER_FORM.fullmatch(text)
    if m is None:
        raise Unparsable(_why_not_a_number(text))
    _check_suffix(m["rest"], bool(m["cur"] or m["cur2"]), rule, text)
    return _mantissa_value(m)


def finite(value: int | float) -> float:
    """A JSON number as a finite float; an integer past float range is refused, not raised on."""
    try:
        x = float(value)
    except OverflowError:
        raise Unparsable(f"an integer of about {_digits(int(value))} digits is out of range") from None
    if not math.isfinite(x):
        raise Unparsable(f"{value!r} is not finite")
    return x


def parse_number(value: Any, rule: UnitRule = ANY_UNIT) -> float:
    """A finite number from a JSON number, a one-element list, or a text read by `parse_text_number`."""
    if isinstance(value, bool):  # bool is an int subclass: True must not pass as 1
        raise Unparsable("a boolean is not a number")
    if isinstance(value, (int, float)):
        return finite(value)
    if isinstance(value, str):
        x = parse_text_number(value, rule)
        if not math.isfinite(x):
            raise Unparsable(f"{value!r} is not finite")
        return x
    if isinstance(value, list) and len(value) == 1:
        return parse_number(value[0], rule)
    raise Unparsable(f"expected a number, got {type(value).__name__}")


# ---------------------------------------------------------------- dates and weeks-and-days

_MDY = re.compile(r"(\d{1,2})/(\d{1,2})/(\d{4})")
# ISO 8601: a date, optionally with a time (after 'T' or a space) and a zone
_ISO = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")  # a stored truth's ISO form: the date alone
# a timestamp as SQLite writes one ('2100-02-25 15:47:00') or ISO 8601 ('2100-02-25T15:47:00'), with at most a
# zero fraction of a second ('.000', as isoformat(timespec='milliseconds') writes). No zone: the records' times
# are local and carry none, so a 'Z' or an offset states something the truth does not.
_DATETIME = re.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2})(:\d{2})?(\.0+)?")


def parse_date(value: Any) -> datetime.date:
    """A calendar date from M/D/Y (MedCalc-Bench's form), YYYY-MM-DD, or an ISO timestamp (its date part)."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, str):
        raise Unparsable(f"expected a date, got {type(value).__name__}")
    text = _normalise(value)
    try:
        if m := _MDY.fullmatch(text):
            return datetime.date(int(m[3]), int(m[1]), int(m[2]))
        if m := _ISO.fullmatch(text):
            return datetime.date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError as exc:
        raise Unparsable(f"{value!r} is not a calendar date: {exc}") from None
    raise Unparsable(f"expected a date as M/D/YYYY or YYYY-MM-DD, got {value!r}")


def datetime_form(text: str) -> str | None:
    """'YYYY-MM-DD HH:MM[:SS]' for a timestamp written with a 'T' or a space, None for any other text.

    The seconds stay as written, so a submission that leaves them out equals only a truth that has none.
    """
    m = _DATETIME.fullmatch(text.strip())
    if m is None or (m[4] and not m[3]):
        return None
    return f"{m[1]} {m[2]}{m[3] or ''}"


# at most 6 digits a count: no more is a gestational age, and int() of a long digit run is slow, then refused
_WEEKS_DAYS = re.compile(
    r"\(?\s*'?(\d{1,6})\s*(?:weeks?|wks?|w)'?\s*(?:,\s*(?:and\s+)?|and\s+)?'?(\d{1,6})\s*(?:days?|d)'?\s*\)?",
    re.I)


# read after `_normalise`, so one optional space stands between the number and its word: two adjacent `\s*`
# around an optional word backtrack quadratically on a long blank run
_WHOLE = {word: re.compile(r"(\d{1,6}) ?(?:" + word.rstrip("s") + r"s?)?", re.I) for word in ("weeks", "days")}


def _whole(value: Any, word: str) -> int:
    """A whole number of `word` ('weeks' or 'days'): 19, 19.0, '19' or '19 weeks' (never '19 days')."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise Unparsable(f"expected a whole number of {word}, got {value!r}")
    if isinstance(value, str):
        m = _WHOLE[word].fullmatch(_normalise(value))
        if not m:
            raise Unparsable(f"expected a whole number of {word}, got {value!r}")
        return int(m[1])
    if isinstance(value, float) and not value.is_integer():  # NaN and infinity included
        raise Unparsable(f"expected a whole number of {word}, got {value!r}")
    return int(value)


def _pair(weeks: Any, days: Any, value: Any) -> tuple[int, int]:
    w, d = _whole(weeks, "weeks"), _whole(days, "days")
    if w < 0 or not 0 <= d < 7:
        raise Unparsable(f"weeks and days need 0 <= days < 7, got {value!r}")
    return w, d


def parse_weeks_days(value: Any) -> tuple[int, int]:
    """(weeks, days) from '(19 weeks, 6 days)', '19 weeks, 6 days', [19, 6], ('19 weeks', '6 days') or
    {"weeks": 19, "days": 6}: MedCalc-Bench's gestational age in every form the release and its prompts use."""
    if isinstance(value, dict):
        low = {str(k).strip().casefold(): v for k, v in value.items()}
        if set(low) != {"weeks", "days"}:
            raise Unparsable(f"expected keys 'weeks' and 'days', got {sorted(low)}")
        return _pair(low["weeks"], low["days"], value)
    if isinstance(value, (list, tuple)):
        if len(value) == 1:
            return parse_weeks_days(value[0])
        if len(value) != 2:
            raise Unparsable(f"expected (weeks, days), got {len(value)} values")
        return _pair(value[0], value[1], value)
    if not isinstance(value, str):
        raise Unparsable(f"expected weeks and days, got {type(value).__name__}")
    text = _normalise(value)
    if m := _WEEKS_DAYS.fullmatch(text):
        return _pair(int(m[1]), int(m[2]), value)
    if text.startswith(("[", "(", "{")):
        parsed = literal(text)
        if parsed is not None:
            return parse_weeks_days(parsed)
    raise Unparsable(f"expected weeks and days such as '(4 weeks, 3 days)', got {value!r}")


def format_weeks_days(weeks: int, days: int) -> str:
    """The one stored form, the one MedCalc-Bench's prompt asks for."""
    return f"({weeks} weeks, {days} days)"


def string_form(truth: Any) -> str | None:
    """'date' or 'weeks_days' where a string truth is one (compared by value, whatever form the answer takes)."""
    if not isinstance(truth, str):
        return None
    text = truth.strip()
    if _MDY.fullmatch(text) or _ISO_DATE.fullmatch(text):
        return "date"
    if _WEEKS_DAYS.fullmatch(text):
        return "weeks_days"
    return None


# ---------------------------------------------------------------- collections


def literal(text: str) -> Any:
    """A JSON or Python literal, or None where the text is neither; one over `check_size`'s caps is refused."""
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        check_size(value)  # the text is bounded, but '[[[[...]]]]' nests deeper than any answer
        return value
    return None


# a number as SQLite and JSON write one: '92' and '10.5' are numbers, '0389' (an ICD-9 code) is text
CANONICAL_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")


def typed_cell(text: str) -> int | float | str | None:
    """A cell of the release's all-string answers with its type back: 'None' is NULL, '92' is 92."""
    t = text.strip()
    if t == "None":
        return None
    if CANONICAL_NUMBER.fullmatch(t):
        x = float(t)
        if not math.isfinite(x):  # '1' followed by 400 digits: no number a cell holds
            return text
        return int(x) if x == int(x) and "." not in t and "e" not in t.lower() else x
    return text


# a number as a list element or a bare list's part may be written: no unit, no thousands separator
PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def split_bare_list(text: str) -> list[str] | None:
    """'13, 14, 39' as three numbers; None where the text is not a comma-separated list of numbers.

    Only numbers are split: a text value may hold commas ('sodium chloride, 0.9%'). '1,234' reads as one
    number or as two, so it is refused rather than guessed.
    """
    t = _normalise(text)
    parts = [p.strip() for p in t.split(",")]
    if len(parts) < 2 or not all(PLAIN_NUMBER.fullmatch(p) for p in parts):
        return None
    if _THOUSANDS.fullmatch(t):
        raise Unparsable(f"{text!r} is ambiguous: one number with a thousands separator, or a list")
    return parts


# ---------------------------------------------------------------- what the prompt asks for


def question_text(prompt: str) -> str:
    """The question of a prompt: after its last 'Question:' where it has one (a patient note names many units)."""
    return prompt.rsplit("Question:", 1)[-1]


_NOT_PERCENT = re.compile(r"\bnot (?:as )?a percent", re.I)
_AS_PERCENT = re.compile(r"\b(?:as|in) (?:a )?percent(?:age)?\b|\bpercentage value\b|\bin %", re.I)
_IN_UNIT = re.compile(r"\bin (?:terms|units) of\s+(\S+)(?:\s+(\S+))?|\bin\s+(\S+)(?:\s+(\S+))?", re.I)
_PAREN_UNIT = re.compile(r"\(([^()]{1,24})\)")


def _unit_candidate(first: str, second: str | None) -> str | None:
    """The known unit that 'in [terms of] <first> [<second>]' names: two words ('mm Hg') before one."""
    joined = bool(second) and not first.endswith((".", "?", ",", ";", ":"))  # punctuation ends the unit
    first, second = first.rstrip("?,;:"), (second or "").rstrip("?,;:")
    tried = ([f"{first} {second}"] if joined else []) + [first]
    for text in tried:
        if unit_key(text) in _GROUP_OF and unit_key(text) not in _PERCENT:
            return text.rstrip(".")
    return None


@lru_cache(maxsize=8192)
def asked_unit(prompt: str) -> str | None:
    """The unit the prompt's question asks the answer in: '%', '' (a plain number: 'not a percentage'), a unit
    ('mL/min/1.73 m²'), or None where it names none or several."""
    q = question_text(prompt)
    if _NOT_PERCENT.search(q):
        return ""
    if _AS_PERCENT.search(q):
        return "%"
    found = [u for m in _IN_UNIT.finditer(q)
             if (u := _unit_candidate(m[1] or m[3], m[2] if m[1] else m[4])) is not None]
    found += [m[1].strip() for m in _PAREN_UNIT.finditer(q) if unit_key(m[1]) in _ANY_UNIT]
    distinct = {_GROUP_OF[unit_key(u)] for u in found}
    return found[0] if len(distinct) == 1 else None


_P_VALUE = re.compile(r"\breport (?:the )?(?:two-sided |one-sided |two-tailed |one-tailed )?p-value\b", re.I)
_UNIT_INTERVAL = re.compile(r"\bbetween 0 and 1\b", re.I)


@lru_cache(maxsize=8192)
def asked_kind(prompt: str) -> ValueKind | None:
    """What the question says the number is: a p-value, or a probability/fraction between 0 and 1."""
    q = question_text(prompt)
    if _P_VALUE.search(q):
        return ValueKind.P_VALUE
    if _UNIT_INTERVAL.search(q):
        return ValueKind.PROBABILITY
    return None
