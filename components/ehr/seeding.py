"""Seed a synthetic MIMIC-III / eICU world with what each EHRSQL question names, so its reference SQL finds rows.

For every question we read (from the post-processed SQL and the release's `value` field) the patient, the named
entities per kind, value thresholds, demographic filters and the dates its time filters point at. A named patient
gets a rich time line (closed stays and a current open one, a stay around every date the question points at) with
events of every named entity in every stay; a few helper patients get the same entities at the same dates so
population counts and rankings are not trivial.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from components.ehr.timeline import NOW, D, H, Visit
from components.ehr.world import Patient, World

_LIT = r"('(?:[^']|'')*'|-?\d+(?:\.\d+)?)"
_COND = re.compile(rf"\b([a-z_][a-z_0-9]*)\.([a-z_0-9]+) (=|like|>=|<=|>|<) {_LIT}")

NAME_COLUMNS = {
    "mimic_iii": {
        ("d_icd_diagnoses", "short_title"): "diagnosis",
        ("d_icd_procedures", "short_title"): "procedure",
        ("d_labitems", "label"): "lab",
        ("prescriptions", "drug"): "drug",
        ("microbiologyevents", "spec_type_desc"): "culture",
    },
    "eicu": {
        ("diagnosis", "diagnosisname"): "diagnosis",
        ("treatment", "treatmentname"): "procedure",
        ("lab", "labname"): "lab",
        ("medication", "drugname"): "drug",
        ("microlab", "culturesite"): "culture",
        ("allergy", "allergyname"): "allergy",
    },
}
EVENT_TABLES = {
    "mimic_iii": {
        "diagnoses_icd": "diagnosis",
        "procedures_icd": "procedure",
        "labevents": "lab",
        "prescriptions": "drug",
        "chartevents": "vital",
        "inputevents_cv": "intake",
        "outputevents": "output",
        "microbiologyevents": "culture",
    },
    "eicu": {
        "diagnosis": "diagnosis",
        "treatment": "procedure",
        "lab": "lab",
        "medication": "drug",
        "vitalperiodic": "vital",
        "microlab": "culture",
        "allergy": "allergy",
    },
}
LINKSTO_KIND = {"chartevents": "vital", "inputevents_cv": "intake", "outputevents": "output"}
VITAL_COLUMNS = (
    "temperature",
    "sao2",
    "heartrate",
    "respiration",
    "systemicsystolic",
    "systemicdiastolic",
    "systemicmean",
)


@dataclass
class Need:
    """What one question needs to find in the database."""

    patient: int | str | None = None
    items: list[tuple[str, str | None]] = field(default_factory=list)  # (kind, name or None for any)
    thresholds: dict[tuple[str, str | None], list[tuple[str, float]]] = field(default_factory=dict)
    times: list[datetime] = field(default_factory=list)
    route: str | None = None
    organism: str | None = None
    careunit: str | None = None
    wardid: int | None = None
    admit_source: str | None = None
    gender: str | None = None
    age: tuple[int, int] | None = None
    need_open: bool = False
    need_dod: bool = False
    expired: bool = False
    step_down: bool = False


def _unquote(lit: str) -> str:
    return lit[1:-1].replace("''", "'") if lit.startswith("'") else lit


def _shift(t: datetime, n: int, unit: str) -> datetime:
    if unit.startswith("year"):
        return t.replace(year=t.year - n, day=min(t.day, 28))
    if unit.startswith("month"):
        m = t.year * 12 + (t.month - 1) - n
        return t.replace(year=m // 12, month=m % 12 + 1, day=min(t.day, 28))
    if unit.startswith("day"):
        return t - timedelta(days=n)
    return t - timedelta(hours=n)


def _dates(q: str) -> list[datetime]:
    """Dates the time filters of `q` point at (after current_time was pinned to NOW)."""
    out: list[datetime] = []
    year = month = day = None
    for fmt_, lit in re.findall(r"strftime\('([%YmdHM\-]+)',[a-z0-9_.]+\) (?:=|>=|<=|<|>) '([\d\-]+)'", q):
        parts = dict(zip(fmt_.replace("%", "").split("-"), lit.split("-"), strict=False))
        try:
            if "Y" in parts and "m" in parts and "d" in parts:
                out.append(datetime(int(parts["Y"]), int(parts["m"]), int(parts["d"]), 8, 0))
                continue
            year = int(parts["Y"]) if "Y" in parts else year
            month = int(parts["m"]) if "m" in parts else month
            day = int(parts["d"]) if "d" in parts else day
        except ValueError:
            continue
    rel = r"datetime\('2105-12-31 23:59:00','start of (year|month|day)','-(\d+) (year|month|day)s?'\)"
    for _start, n, unit in re.findall(rel, q):
        t = _shift(NOW, int(n), unit)
        if unit.startswith("year"):
            year = t.year
        elif unit.startswith("month"):
            year, month = t.year, t.month
        else:
            year, month, day = t.year, t.month, t.day
    if year or month or day:
        y = year or 2105
        m = month or (6 if y < 2105 else 10)
        d = day or 14
        with contextlib.suppress(ValueError):  # e.g. a 02-30 in a question
            out.append(datetime(y, m, d, 8, 0))
    for stamp in re.findall(r"\.[a-z]*time \= '(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)'", q):
        out.append(datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S"))
    for op, n, unit in re.findall(
        r"datetime\([a-z0-9_.]+\) (>=|<=) datetime\('2105-12-31 23:59:00','-(\d+) (year|month|day|hour)s?'\)", q
    ):
        edge = _shift(NOW, int(n), unit)
        if op == ">=":
            out.append(edge + (NOW - edge) * 0.5)
        else:
            out.append(edge - 20 * D)
    return [min(t, NOW - 2 * H) for t in out if t >= datetime(2100, 1, 2)]


def read_need(schema: str, query: str, value: dict | None) -> Need:
    """Parse one post-processed EHRSQL query (and its `value` dict) into a Need."""
    need = Need()
    value = value or {}
    names = NAME_COLUMNS[schema]
    kinds_seen: set[str] = set()
    for table, kind in EVENT_TABLES[schema].items():
        if re.search(rf"\b{table}\.", query):
            kinds_seen.add(kind)
    if schema == "eicu" and "intakeoutput." in query:
        if "'%output%'" in query:
            kinds_seen.add("output")
        if "'%intake%'" in query or "'%input%'" in query:
            kinds_seen.add("intake")
    named: list[tuple[str, str]] = []
    for table, col, op, lit in _COND.findall(query):
        v = _unquote(lit)
        if (table, col) in names:
            named.append((names[(table, col)], v))
        elif col in ("subject_id", "uniquepid") and op == "=":
            need.patient = int(v) if schema == "mimic_iii" else v
        elif (table, col) in (("prescriptions", "route"), ("medication", "routeadmin")):
            need.route = v
        elif col in ("org_name", "organism"):
            need.organism = v
        elif col == "careunit":
            need.careunit = v
        elif col == "wardid":
            need.wardid = int(float(v))
        elif col in ("admission_location", "hospitaladmitsource"):
            need.admit_source = v
        elif col == "gender":
            need.gender = v
        elif col == "age" and op in (">=", ">"):
            need.age = (int(float(v)), int(float(v)) + 15)
        elif col == "hospitaldischargestatus" and v == "expired":
            need.expired = True
        elif col in ("valuenum", "labresult") or (table == "vitalperiodic" and col in VITAL_COLUMNS):
            kind = (
                "lab"
                if col == "labresult" or table == "labevents" or (table != "chartevents" and "labevents" in query)
                else "vital"
            )
            name = col if table == "vitalperiodic" else None
            need.thresholds.setdefault((kind, name), []).append((op, float(v)))
            if table == "vitalperiodic":
                named.append(("vital", col))
        elif (table, col) == ("intakeoutput", "celllabel"):
            named.append(("output" if "'%output%'" in query else "intake", v))
    for label, linksto in re.findall(rf"d_items\.label = {_LIT} and d_items\.linksto = '(\w+)'", query):
        named.append((LINKSTO_KIND.get(linksto, "vital"), _unquote(label)))
        kinds_seen.add(LINKSTO_KIND.get(linksto, "vital"))
    if schema == "eicu":
        for col in re.findall(r"vitalperiodic\.(\w+) is not null", query):
            named.append(("vital", col))
    m = re.search(r"\.age between (\d+) and (\d+)", query)
    if m:
        need.age = (int(m.group(1)), int(m.group(2)))
    if need.patient is None and "patient_id" in value:
        pid = value["patient_id"]
        need.patient = int(pid) if schema == "mimic_iii" and str(pid).isdigit() else pid
    need.need_open = bool(re.search(r"(dischtime|hospitaldischargetime|outtime|unitdischargetime) is null", query))
    need.need_dod = ".dod" in query
    # weight changes within one hospital stay need a second unit stay to carry a second admission weight
    need.step_down = "patient.admissionweight" in query
    seen: set[tuple[str, str | None]] = set()
    for kind, name in named:
        if (kind, name) not in seen:
            seen.add((kind, name))
            need.items.append((kind, name))
    for kind in sorted(kinds_seen - {k for k, _ in named}):
        need.items.append((kind, None))
    # thresholds read off chartevents/labevents apply to the named vital/lab of the question
    for (kind, name), ths in list(need.thresholds.items()):
        if name is None:
            for k, n in need.items:
                if k == kind and n is not None:
                    need.thresholds.setdefault((k, n), []).extend(ths)
    need.times = _dates(query)
    return need


def _values_for(ths: list[tuple[str, float]]) -> list[float]:
    """Values on both sides of every threshold so comparisons in either direction find rows."""
    out = []
    for op, x in ths:
        if op == "=":
            out.append(x)
            continue
        step = max(abs(x) * 0.08, 1.0)
        out += [round(x + step, 1), round(x - step, 1)]
    return out


class Seeder:
    def __init__(self, world: World, helpers_with_patient: int = 2, helpers_without: int = 3):
        self.w = world
        self.rng = world.rng
        self.h_with, self.h_without = helpers_with_patient, helpers_without

    # stays --------------------------------------------------------------------------------------------
    def _rich_timeline(self, p: Patient) -> None:
        if not p.visits:
            self.w.base_timeline(p, 3, open_current=True)
            for v in list(p.visits):
                self.w.populate_visit(p, v, density=0.6)
        tries = 0
        while sum(v.end is not None for v in p.visits) < 2 and tries < 20:
            tries += 1
            t = datetime(2100 + self.rng.randint(0, 4), self.rng.randint(1, 12), self.rng.randint(1, 28), 10)
            v = self.w.ensure_visit(p, t)
            if v is not None and v.end is not None:
                self.w.populate_visit(p, v, density=0.6)
        if p.dod is None:
            self.w.ensure_open_visit(p)

    def _apply_attrs(self, v: Visit, need: Need) -> None:
        if need.careunit and need.careunit != v.careunit and need.careunit not in v.extra_careunits:
            v.extra_careunits.append(need.careunit)
        if need.wardid is not None:
            v.wardid = need.wardid
        if need.admit_source:
            v.admit_source = need.admit_source

    # events -------------------------------------------------------------------------------------------
    def _emit_items(self, p: Patient, v: Visit, times: list[datetime], need: Need) -> None:
        for kind, name in need.items:
            vals = _values_for(need.thresholds.get((kind, name), []))
            for i, t in enumerate(times):
                t2 = v.clip(t)
                if t2 is None:
                    continue
                value = vals[i % len(vals)] if vals else None
                organism = need.organism if kind == "culture" else None
                route = need.route if kind == "drug" else None
                self.w.event(kind, p, v, t2, name, value=value, route=route, organism=organism)

    def _stay_times(self, v: Visit) -> list[datetime]:
        end = v.end if v.end is not None else NOW - H
        mid = v.start + (end - v.start) / 2
        return [v.start + 5 * H, v.start + 9 * H, mid.replace(second=0, microsecond=0), end - 7 * H]

    def _seed_patient(self, p: Patient, need: Need) -> None:
        for t in need.times:
            self.w.ensure_visit(p, t)
        if need.need_open and p.dod is None:
            self.w.ensure_open_visit(p)
        for v in p.visits:
            self._apply_attrs(v, need)
            self._emit_items(p, v, self._stay_times(v), need)
        for t in need.times:
            v = p.visit_at(t)
            if v is not None:
                self._emit_items(p, v, [t, t + 4 * H, t + 2 * D], need)

    def _helper(self, need: Need) -> None:
        age = None if need.age is None else (need.age[0] + need.age[1]) // 2 + (2105 - 2103) - 1
        p = self.w.add_patient(gender=need.gender, age=age)
        if need.expired:
            p.expired = True
        for t in need.times:
            self.w.ensure_visit(p, t)
        if not need.times:
            self.w.base_timeline(p, 2, open_current=need.need_open or self.rng.random() < 0.2)
        if need.need_open:
            self.w.ensure_open_visit(p)
        if need.need_dod:
            last = max((v.end or NOW for v in p.visits), default=NOW - 30 * D)
            first_t = min(need.times) if need.times else last
            p.dod = min(max(last, first_t) + 10 * D, NOW - H)
        for v in p.visits:
            self.w.populate_visit(p, v, density=0.4)
        self._seed_patient(p, need)

    def seed(self, needs: list[Need]) -> None:
        by_patient: dict[int | str, list[Need]] = {}
        for n in needs:
            if n.patient is not None:
                by_patient.setdefault(n.patient, []).append(n)
        for pid in sorted(by_patient, key=str):
            ns = by_patient[pid]
            gender = next((n.gender for n in ns if n.gender), None)
            p = self.w.add_patient(pid, gender=gender)
            p.step_down = any(n.step_down for n in ns)
            self._rich_timeline(p)
            for n in ns:
                self._seed_patient(p, n)
        for n in needs:
            for _ in range(self.h_with if n.patient is not None else self.h_without):
                self._helper(n)
