"""Lab results as text, in DiagGym's own format, and the numbers read back from it.

One analyte is one line, as DiagGym's records write it:
    Value: 128; Numeric Value: 128.0; Units: mmol/L; Reference Range: 135 - 145; Flag: abnormal
A panel is one such line per component, each after its name ("Sodium: Value: 128; ..."). Dipstick values have no
numeric value ("Value: 2+; Reference Range: Negative; Flag: abnormal"); read back, they are the level's index.
Microbiology and imaging results are free text and are not parsed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from components.diag.catalogue import Analyte, Catalogue, Exam, ExamKind

_LINE = re.compile(r"^\s*(?:(?P<name>[^:\n]+?):\s*)?Value:\s*(?P<value>[^;\n]*)(?:;\s*Numeric Value:\s*(?P<num>[^;\n]*))?",
                   re.IGNORECASE)


def display(analyte: Analyte, value: float) -> str:
    if analyte.ordinal:
        return analyte.levels[int(round(min(max(value, 0), len(analyte.levels) - 1)))]
    return f"{round(value, analyte.decimals):.{analyte.decimals}f}"


def rounded(analyte: Analyte, value: float) -> float:
    """The value as reported: clipped to what it can be, rounded to its decimals (ordinal: a level index)."""
    lo, hi = analyte.bounds or (float("-inf"), float("inf"))
    value = min(max(value, lo), hi)
    if analyte.ordinal:
        return float(int(round(value)))
    return round(value, analyte.decimals)


def analyte_line(analyte: Analyte, value: float) -> str:
    flag = "; Flag: abnormal" if analyte.abnormal(value) else ""
    if analyte.ordinal:
        return f"Value: {display(analyte, value)}; Reference Range: {analyte.reference()}{flag}"
    shown = display(analyte, value)
    units = f"; Units: {analyte.unit}" if analyte.unit else ""
    return f"Value: {shown}; Numeric Value: {float(shown)}{units}; Reference Range: {analyte.reference()}{flag}"


def format_lab(exam: Exam, values: Mapping[str, float], catalogue: Catalogue) -> str:
    """A lab's or a panel's result from its analytes' values (components missing from `values` are left out)."""
    if exam.kind == ExamKind.LAB:
        name = exam.analytes[0]
        return analyte_line(catalogue.analytes[name], values[name])
    return "\n".join(f"{a}: {analyte_line(catalogue.analytes[a], values[a])}" for a in exam.analytes if a in values)


def parse_values(text: str, exam: Exam | None, catalogue: Catalogue) -> dict[str, float]:
    """The analyte values a lab result states: named lines map through the catalogue, an unnamed line is the
    exam's own analyte; lines that name no known analyte or hold no number are skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        analyte: Analyte | None = None
        if m.group("name"):
            named = catalogue.exam(m.group("name"))
            if named is not None and named.kind == ExamKind.LAB:
                analyte = catalogue.analytes[named.analytes[0]]
        elif exam is not None and exam.kind == ExamKind.LAB:
            analyte = catalogue.analytes[exam.analytes[0]]
        if analyte is None:
            continue
        value = _number(analyte, m.group("value").strip(), (m.group("num") or "").strip())
        if value is not None:
            out[analyte.name] = value
    return out


def _number(analyte: Analyte, shown: str, numeric: str) -> float | None:
    if analyte.ordinal:
        levels = [lv.lower() for lv in analyte.levels]
        return float(levels.index(shown.lower())) if shown.lower() in levels else None
    for text in (numeric, shown):
        m = re.search(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", text.replace(",", ""))
        if m and text.lower() not in ("none", "nan"):
            return float(m.group(0))
    return None


def component_line(panel_text: str, analyte: str, catalogue: Catalogue) -> str | None:
    """The one line of a panel's result that reports `analyte`, without its name prefix (a component ordered alone
    from a recorded panel)."""
    for line in panel_text.splitlines():
        m = _LINE.match(line)
        if m and m.group("name"):
            named = catalogue.exam(m.group("name"))
            if named is not None and named.name == analyte:
                return line[line.lower().index("value:", len(m.group("name"))):].strip()
    return None
