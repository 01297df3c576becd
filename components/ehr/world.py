"""What both EHRSQL builders share: patients with time lines, and events of named kinds placed inside visits.

Kinds: diagnosis, procedure (eICU: treatment), lab, drug, vital, intake, output, culture, allergy (eICU only).
Subclasses say how a kind becomes rows of their schema.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from components.ehr.store import TableStore
from components.ehr.timeline import NOW, D, H, Visit, base_intervals, free_slot, random_time

KINDS = ("diagnosis", "procedure", "lab", "drug", "vital", "intake", "output", "culture")


@dataclass
class Patient:
    pid: int | str
    gender: str
    birth: datetime
    dod: datetime | None = None
    visits: list[Visit] = field(default_factory=list)
    age_hint: tuple[int, int] | None = None
    expired: bool = False
    step_down: bool = False  # eICU: each hospital stay also holds a short step-down unit stay (weight questions)

    def visit_at(self, t: datetime) -> Visit | None:
        for v in self.visits:
            if v.contains(t):
                return v
        return None

    def has_open(self) -> bool:
        return any(v.end is None for v in self.visits)


class World:
    """Subclasses set `store`, implement `new_pid`, `_emit_*` and `finish`."""

    store: TableStore
    kinds: tuple[str, ...] = KINDS

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.patients: dict[int | str, Patient] = {}
        self._next_hid = 100001
        self._next_uid = 200001
        self._costs: dict[tuple[str, str], float] = {}

    # ---- ids and patients ------------------------------------------------------------------------------
    def new_pid(self) -> int | str:
        raise NotImplementedError

    def next_visit_ids(self) -> tuple[int, int]:
        hid, uid = self._next_hid, self._next_uid
        self._next_hid += self.rng.randint(1, 9)
        self._next_uid += self.rng.randint(1, 9)
        return hid, uid

    def add_patient(self, pid: int | str | None = None, gender: str | None = None, age: int | None = None) -> Patient:
        if pid is None:
            pid = self.new_pid()
        if pid in self.patients:
            return self.patients[pid]
        age = age if age is not None else self.rng.randint(18, 88)
        birth = datetime(2103 - age, self.rng.randint(1, 12), self.rng.randint(1, 28))
        p = Patient(pid, gender or self.rng.choice(self.genders), birth)
        self.patients[pid] = p
        return p

    genders: tuple[str, str] = ("m", "f")

    def add_visit(self, p: Patient, start: datetime, end: datetime | None, **attrs: object) -> Visit:
        hid, uid = self.next_visit_ids()
        v = Visit(
            hid,
            uid,
            start,
            end,
            careunit=self.rng.choice(self.careunits),
            wardid=self.rng.choice(self.wards),
            admit_source=self.rng.choice(self.admit_sources),
        )
        for k, val in attrs.items():
            if val:
                setattr(v, k, val)
        p.visits.append(v)
        p.visits.sort(key=lambda x: x.start)
        return v

    careunits: list[str] = []
    wards: list[int] = []
    admit_sources: list[str] = []

    def base_timeline(self, p: Patient, n_closed: int, open_current: bool) -> None:
        for start, end in base_intervals(self.rng, n_closed, open_current):
            if any(v.contains(start) or (end and v.contains(end)) for v in p.visits):
                continue
            self.add_visit(p, start, end)

    def ensure_visit(self, p: Patient, t: datetime) -> Visit | None:
        v = p.visit_at(t)
        if v is not None:
            return v
        slot = free_slot(p.visits, t, before=D + 3 * H, after=3 * D)
        if slot is None:
            return None
        return self.add_visit(p, slot[0], slot[1])

    def ensure_open_visit(self, p: Patient) -> None:
        if p.has_open():
            return
        last_end = max((v.end for v in p.visits if v.end is not None), default=NOW - 30 * D)
        start = max(last_end + 6 * H, NOW - timedelta(days=self.rng.randint(3, 12)))
        if start < NOW - 8 * H:
            self.add_visit(p, start, None)

    # ---- events --------------------------------------------------------------------------------------
    def cost_of(self, event_type: str, name: str) -> float:
        key = (event_type, name)
        if key not in self._costs:
            self._costs[key] = round(
                self.rng.uniform(2.0, 40.0) if event_type != "procedures_icd" else self.rng.uniform(300, 4000), 2
            )
        return self._costs[key]

    def event(
        self,
        kind: str,
        p: Patient,
        v: Visit,
        t: datetime,
        name: str | None = None,
        value: float | None = None,
        route: str | None = None,
        organism: str | None = None,
    ) -> None:
        getattr(self, f"_emit_{kind}")(p, v, t, name, value, route, organism)

    def random_name(self, kind: str) -> str:
        raise NotImplementedError

    def populate_visit(self, p: Patient, v: Visit, density: float = 1.0) -> None:
        """Background events: a few of every kind spread over the stay."""
        rng = self.rng
        end = v.end if v.end is not None else NOW - H
        lo, hi = v.start + 2 * H, max(end - 2 * H, v.start + 3 * H)
        counts = {
            "diagnosis": (2, 5),
            "procedure": (1, 3),
            "lab": (4, 12),
            "drug": (3, 8),
            "vital": (3, 10),
            "intake": (2, 6),
            "output": (2, 6),
            "culture": (0, 2),
            "allergy": (0, 1),
        }
        for kind in self.kinds:
            a, b = counts[kind]
            for _ in range(int(rng.randint(a, b) * density + 0.5)):
                self.event(kind, p, v, random_time(rng, lo, hi))

    def finish(self) -> None:
        """Emit the rows that depend on whole time lines (patients, stays)."""
        raise NotImplementedError
