"""Build one patient: sample the values a calculator reads, phrase them as facts, add distractors, render a note.

`CaseBuilder` records, for every formula argument, the value the formula gets and the Python expression
that produces it from what the note shows (e.g. `creatinine_umol_l_to_mg_dl(97.0)`), so the reference
code and the answer come from the same numbers the reader sees.
"""

from __future__ import annotations

import datetime
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from components.tasks.calculators import units
from components.tasks.calculators.vocabulary import (
    COMPLAINTS,
    DISTRACTOR_LABS,
    NEUTRAL_FACTS,
    Finding,
    Q,
    Quantity,
    Unit,
)

SECTIONS = ("history", "vitals", "anthropometry", "exam", "labs", "ecg", "plan", "prior", "other")

PRIOR_WHEN = (
    "at a clinic visit {m} months ago",
    "during an admission {y} years earlier",
    "on outside records from {y} years ago",
    "at a pre-operative assessment {m} months ago",
)


@dataclass
class Fact:
    section: str
    text: str  # a clause without the final full stop


@dataclass
class Case:
    args: dict[str, Any] = field(default_factory=dict)  # formula argument -> value the formula gets
    exprs: dict[str, str] = field(default_factory=dict)  # formula argument -> Python expression for it
    converters: list[str] = field(default_factory=list)  # units.py functions the expressions call
    facts: list[Fact] = field(default_factory=list)
    entities: dict[str, Any] = field(default_factory=dict)  # MedCalc-Bench's "relevant entities"
    shown: dict[str, str] = field(default_factory=dict)  # entity -> exact text the note carries
    worded: list[str] = field(default_factory=list)  # arguments the note states in words, not digits
    age: int = 50
    sex: str = "male"


def near(*cutoffs: float, rel: float = 0.015) -> Callable[[float], bool]:
    """A reject rule: values within `rel` of a cut-off, where rounding and unit conversion decide the points."""
    return lambda v: any(abs(v - c) <= rel * abs(c) for c in cutoffs)


def _fmt(value: float, decimals: int) -> float | int:
    # negative decimals round to tens/hundreds/thousands, as counts per µL are reported
    return int(round(value, decimals)) if decimals <= 0 else round(value, decimals)


class CaseBuilder:
    """Sampling helpers for one task; every random choice goes through the task's own rng."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.case = Case()
        self.used: set[str] = set()

    # -------------------------------------------------------------- demographics
    def demographics(
        self,
        age: tuple[int, int] = (18, 90),
        sex: str | None = None,
        arg_age: str | None = "age",
        arg_sex: str | None = "sex",
    ) -> None:
        c = self.case
        c.age = self.rng.randint(*age)
        c.sex = sex or self.rng.choice(("male", "female"))
        if arg_age:
            c.args[arg_age], c.exprs[arg_age] = c.age, repr(c.age)
            c.entities["age"] = [c.age, "years"]
        if arg_sex:
            c.args[arg_sex], c.exprs[arg_sex] = c.sex, repr(c.sex)
            c.entities["sex"] = c.sex

    # -------------------------------------------------------------- measured values
    def quantity(
        self,
        arg: str | None,
        key: str,
        lo: float,
        hi: float,
        *,
        units_allowed: tuple[int, ...] | None = None,
        prior: float = 0.35,
        value: float | None = None,
        reject: Callable[[float], bool] | None = None,
        log: bool = False,
    ) -> float:
        """Sample a value in [lo, hi] (formula units), show it in one of the quantity's units, return the
        value the formula gets (the shown number converted back, so note and answer agree exactly).
        `reject(value)` redraws values that sit on a cut-off that sources read two ways."""
        q = Q[key]
        choices = units_allowed if units_allowed is not None else tuple(range(len(q.units)))
        for _ in range(100):
            unit = q.units[self.rng.choice(choices)]
            if value is not None:
                canonical = value
            elif log:  # right-skewed analytes (creatinine, bilirubin, enzymes): log-uniform
                canonical = math.exp(self.rng.uniform(math.log(lo), math.log(hi)))
            else:
                canonical = self.rng.uniform(lo, hi)
            shown = _fmt(unit.from_canonical(canonical), unit.decimals)
            got = unit.to_canonical(shown)
            if reject is None or not reject(got):
                break
            if value is not None:
                value = self.rng.uniform(lo, hi) if hi > lo else value * self.rng.uniform(0.9, 1.1)
        else:
            raise RuntimeError(f"could not draw {key} in [{lo}, {hi}] away from its cut-offs")
        c = self.case
        text = unit.render(shown)
        self.used.add(key)
        if arg is not None:  # None: mentioned for realism, read by no formula
            c.args[arg] = got
            if unit.converter:
                c.exprs[arg] = f"{unit.converter}({shown!r})"
                if unit.converter not in c.converters:
                    c.converters.append(unit.converter)
            else:
                c.exprs[arg] = repr(shown)
            c.entities[key] = [shown, unit.symbol or ("ft/in" if unit.ft_in else "")]
            c.shown[key] = text
        c.facts.append(Fact(q.section, self._phrase(q, text)))
        if arg is not None and q.section in ("labs", "vitals") and self.rng.random() < prior:
            self._prior_value(q, unit, canonical, lo, hi)
        return got

    def blood_pressure(
        self, arg_sys: str | None, arg_dia: str | None, sys: tuple[int, int], dia: tuple[int, int]
    ) -> tuple[int, int]:
        s = self.rng.randint(*sys)
        d = min(self.rng.randint(*dia), s - 20)
        c = self.case
        for arg, v, entity in ((arg_sys, s, "systolic_bp"), (arg_dia, d, "diastolic_bp")):
            if arg:
                c.args[arg], c.exprs[arg] = v, repr(v)
                c.entities[entity] = [v, "mmHg"]
                c.shown["blood_pressure"] = f"{s}/{d} mmHg"
        self.used.add("blood_pressure")
        form = self.rng.choice(("blood pressure {} ", "BP {}", "blood pressure of {}", "blood pressure was {}"))
        c.facts.append(Fact("vitals", form.format(f"{s}/{d} mmHg").strip()))
        if self.rng.random() < 0.35:
            ps, pd = self.rng.randint(100, 150), self.rng.randint(60, 95)
            if (ps, pd) != (s, d):
                c.facts.append(Fact("prior", f"{self._when()}, blood pressure was {ps}/{pd} mmHg"))
        return s, d

    def _phrase(self, q: Quantity, text: str) -> str:
        name = self.rng.choice(q.names)
        form = self.rng.choice(("{n} {v}", "{n} of {v}", "{n} was {v}", "{n}: {v}"))
        return form.format(n=name, v=text)

    def _when(self) -> str:
        w = self.rng.choice(PRIOR_WHEN).format(m=self.rng.randint(3, 11), y=self.rng.randint(2, 6))
        return w[0].upper() + w[1:]

    def _prior_value(self, q: Quantity, unit: Unit, current: float, lo: float, hi: float) -> None:
        """An older measurement of the same thing, clearly dated, that the reader must ignore."""
        if hi <= lo:  # the caller fixed the value; draw the old one from the analyte's usual range
            lo, hi = q.typical  # in the formulas' unit, like `current`
        # clearly different from today's value: at least a fifth of the sampling range away
        gap = 0.2 * (hi - lo)
        choices = [(lo, current - gap), (current + gap, hi)]
        spans = [(a, b) for a, b in choices if b > a]
        a, b = self.rng.choice(spans) if spans else (hi, hi)
        old = self.rng.uniform(a, b)
        shown = _fmt(unit.from_canonical(old), unit.decimals)
        if unit.render(shown) == self.case.shown.get(q.key):
            return
        self.case.facts.append(Fact("prior", f"{self._when()}, {q.names[0]} was {unit.render(shown)}"))

    # -------------------------------------------------------------- findings and graded items
    def finding(self, arg: str, f: Finding, p: float, *, entity: str | None = None) -> bool:
        present = self.rng.random() < p
        c = self.case
        c.args[arg], c.exprs[arg] = present, repr(present)
        c.entities[entity or f.key] = present
        if present:
            c.facts.append(Fact(f.section, self.rng.choice(f.present)))
        elif not f.may_omit or self.rng.random() < 0.6:
            c.facts.append(Fact(f.section, self.rng.choice(f.absent)))
        return present

    def graded(
        self,
        arg: str,
        entity: str,
        options: list[tuple[Any, tuple[str, ...]]],
        section: str = "exam",
        weights: list[float] | None = None,
    ) -> Any:
        """Pick one graded option (value, phrasings) and state it."""
        value, phrases = self.rng.choices(options, weights=weights)[0]
        c = self.case
        c.args[arg], c.exprs[arg] = value, repr(value)
        c.worded.append(arg)
        c.entities[entity] = value
        c.facts.append(Fact(section, self.rng.choice(phrases)))
        return value

    def literal(
        self,
        arg: str,
        value: Any,
        fact: Fact | None,
        entity: str | None = None,
        shown: str | None = None,
        worded: bool = False,
    ) -> None:
        c = self.case
        c.args[arg], c.exprs[arg] = value, repr(value)
        if worded:
            c.worded.append(arg)
        if entity:
            c.entities[entity] = value
        if shown and entity:
            c.shown[entity] = shown
        if fact:
            c.facts.append(fact)

    # -------------------------------------------------------------- noise
    def distractors(self, exclude: tuple[str, ...] = ()) -> None:
        """Unrelated labs, an old vital sign, neutral history: nothing a calculator may read."""
        rng, c = self.rng, self.case
        pool = [k for k in DISTRACTOR_LABS if k not in self.used and k not in exclude]
        for key in rng.sample(pool, k=min(len(pool), rng.randint(2, 5))):
            q = Q[key]
            unit = q.units[0]
            shown = _fmt(rng.uniform(*q.typical), unit.decimals)
            c.facts.append(Fact("labs", self._phrase(q, unit.render(shown))))
        if "heart_rate" not in exclude and rng.random() < 0.4:
            c.facts.append(Fact("prior", f"{self._when()}, heart rate was {rng.randint(58, 96)} bpm"))
        facts = NEUTRAL_FACTS if c.age >= 18 else tuple(f for f in NEUTRAL_FACTS if not re.search(r"works|retired", f))
        for text in rng.sample(facts, k=rng.randint(1, 3)):
            c.facts.append(Fact("other", text.rstrip(".")))


# ------------------------------------------------------------------ dates


def random_date(rng: random.Random, start_year: int = 2005, end_year: int = 2024) -> datetime.date:
    start = datetime.date(start_year, 1, 1).toordinal()
    end = datetime.date(end_year, 12, 31).toordinal()
    return datetime.date.fromordinal(rng.randint(start, end))


def render_date(d: datetime.date, style: int) -> str:
    if style == 0:
        return d.strftime("%m/%d/%Y")
    if style == 1:
        return d.isoformat()
    return f"{d.strftime('%B')} {d.day}, {d.year}"


# ------------------------------------------------------------------ note templates

TEMPLATE_COUNT = 4


def _sentence(text: str) -> str:
    text = text.strip()
    text = text[0].upper() + text[1:] if text else text
    return text if text.endswith((".", "!", "?")) else text + "."


def _history(text: str, rng: random.Random) -> str:
    """Turn a bare clause ("a prior stroke", "no hemoptysis") into a sentence."""
    if text[:1].isupper():
        return _sentence(text)
    if text.startswith("no "):
        return _sentence("There is " + text)
    if text.startswith("denies "):
        return _sentence("The patient " + text)
    return _sentence(rng.choice(("History is notable for ", "Notable for ", "Pertinent history: ")) + text)


def _join(clauses: list[str]) -> str:
    return "; ".join(clauses)


def render_note(case: Case, rng: random.Random, template: int, complaints: tuple[str, ...] = ()) -> str:
    by: dict[str, list[str]] = {s: [] for s in SECTIONS}
    for fact in case.facts:
        by[fact.section].append(fact.text)
    for texts in by.values():
        rng.shuffle(texts)
    complaint = rng.choice(complaints or COMPLAINTS)
    adult = case.age >= 18
    sex_word = {
        "male": ("man" if adult else "boy", "male", "M"),
        "female": ("woman" if adult else "girl", "female", "F"),
    }[case.sex]
    age = case.age
    if template == 0:  # narrative case report
        verb = rng.choice(("was seen for", "was evaluated for", "presented with"))
        article = "An" if str(age).startswith("8") or age in (11, 18) else "A"
        parts = [f"{article} {age}-year-old {sex_word[0]} {verb} {complaint}."]
        parts += [_history(t, rng) for t in by["history"]]
        if by["vitals"] or by["anthropometry"]:
            parts.append(_sentence("On arrival, " + ", ".join(by["vitals"] + by["anthropometry"])))
        parts += [_sentence(t) for t in by["exam"]]
        if by["labs"]:
            parts.append(_sentence("Laboratory studies on admission showed " + ", ".join(by["labs"])))
        parts += [_sentence("Today's ECG: " + t) for t in by["ecg"]]
        parts += [_sentence(t) for t in by["other"] + by["prior"] + by["plan"]]
        return " ".join(parts)
    if template == 1:  # structured H&P
        lines = [f"HPI: {age}-year-old {sex_word[1]} seen today for {complaint}."]
        if by["history"]:
            lines.append("History: " + " ".join(_history(t, rng) for t in by["history"]))
        if by["vitals"] or by["anthropometry"]:
            lines.append("Vitals (current): " + _join(by["vitals"] + by["anthropometry"]) + ".")
        if by["exam"]:
            lines.append("Exam: " + " ".join(_sentence(t) for t in by["exam"]))
        if by["labs"]:
            lines.append("Labs (today): " + _join(by["labs"]) + ".")
        if by["ecg"]:
            lines.append("ECG (today): " + _join(by["ecg"]) + ".")
        if by["other"]:
            lines.append("Other: " + " ".join(_sentence(t) for t in by["other"]))
        if by["prior"]:
            lines.append("Prior records (not current): " + " ".join(_sentence(t) for t in by["prior"]))
        if by["plan"]:
            lines.append("Plan: " + " ".join(_sentence(t) for t in by["plan"]))
        return "\n".join(lines)
    if template == 2:  # consult letter
        parts = [f"Thank you for referring this {age}-year-old {sex_word[0]}, whom I saw today regarding {complaint}."]
        history = by["history"] + by["other"]
        rng.shuffle(history)
        parts += [_history(t, rng) for t in history]
        if by["prior"]:
            parts.append("For comparison, older results: " + " ".join(_sentence(t) for t in by["prior"]))
        current = by["vitals"] + by["anthropometry"] + by["labs"]
        if current:
            parts.append(_sentence("At today's visit, " + ", ".join(current)))
        parts += [_sentence(t) for t in by["exam"]]
        parts += [_sentence("An ECG recorded today showed " + t) for t in by["ecg"]]
        parts += [_sentence(t) for t in by["plan"]]
        return " ".join(parts)
    # terse progress note
    lines = [f"{age}{sex_word[2]} c/o {complaint}."]
    if by["history"]:
        lines.append("Hx: " + _join(by["history"]) + ".")
    if by["prior"]:
        lines.append("Old values (superseded): " + _join(by["prior"]) + ".")
    if by["vitals"] or by["anthropometry"]:
        lines.append("VS now: " + _join(by["vitals"] + by["anthropometry"]) + ".")
    if by["exam"]:
        lines.append("PE: " + _join(by["exam"]) + ".")
    if by["labs"]:
        lines.append("Labs now: " + _join(by["labs"]) + ".")
    if by["ecg"]:
        lines.append("ECG now: " + _join(by["ecg"]) + ".")
    if by["other"]:
        lines.append("Misc: " + _join(by["other"]) + ".")
    if by["plan"]:
        lines.append("Plan: " + _join(by["plan"]) + ".")
    return "\n".join(lines)


def converter_source_names() -> tuple[str, ...]:
    return tuple(n for n in dir(units) if not n.startswith("_") and callable(getattr(units, n)) and n != "annotations")
