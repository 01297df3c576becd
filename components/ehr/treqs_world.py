"""TREQS (MIMICSQL) rows: one demographic row per admission, with diagnoses, procedures, prescriptions and labs."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

from components.ehr import schema_treqs as schema
from components.ehr import vocab
from components.ehr.store import TableStore
from components.ehr.timeline import fmt

LAB_FLAGS = ["abnormal", "delta", None, None, None]


class TreqsWorld:
    def __init__(self, rng: random.Random, wide: bool = False):
        """`wide`: draw diagnoses, procedures and drugs from the wider vocabularies (generated tasks)."""
        self.rng = rng
        self._diagnoses = vocab.DIAGNOSES + (vocab.EXTRA_DIAGNOSES if wide else [])
        self._procedures = vocab.PROCEDURES + (vocab.EXTRA_PROCEDURES if wide else [])
        self._drugs: list[tuple[str, tuple[str, ...], str, str, str, str]] = [
            (d, (route, *(vocab.EXTRA_ROUTES.get(d, ()) if wide else ())), dose, unit, code, dtype)
            for d, route, dose, unit, code, dtype in vocab.DRUGS
        ] + (vocab.EXTRA_DRUGS if wide else [])
        self.store = TableStore(schema.TABLES, schema.INDEXES)
        self.subjects: dict[int, dict[str, Any]] = {}
        self.names: dict[str, int] = {}
        self._hadm = 100000
        self._sid = 100
        self._icustay = 200000
        self.itemids = {label: 50800 + 3 * i for i, (label, *_r) in enumerate(vocab.LABS)}

    def subject(self, sid: int | None = None, name: str | None = None) -> int:
        if name is not None and name in self.names:
            return self.names[name]
        if sid is None:
            self._sid += self.rng.randint(1, 30)
            while self._sid in self.subjects:
                self._sid += 1
            sid = self._sid
        if sid not in self.subjects:
            r = self.rng
            name = name or f"{r.choice(vocab.FIRST_NAMES)} {r.choice(vocab.LAST_NAMES)}"
            dob_year = r.randint(2040, 2170)
            self.subjects[sid] = {
                "name": name,
                "gender": r.choice(["m", "f"]),
                "dob": datetime(dob_year, r.randint(1, 12), r.randint(1, 28)),
                "language": r.choice(vocab.LANGUAGES),
                "religion": r.choice(vocab.RELIGIONS),
                "ethnicity": r.choice(vocab.ETHNICITIES),
                "marital_status": r.choice(vocab.MARITAL),
                "expire_flag": int(r.random() < 0.3),
            }
            self.names.setdefault(name, sid)
        return sid

    def admission(self, sid: int, **over: Any) -> int:
        """Add a demographic row; `over` pins columns (an age pins the admission year from the birth year)."""
        r, subj = self.rng, self.subjects[sid]
        for k in ("name", "gender", "language", "religion", "ethnicity", "marital_status", "expire_flag"):
            if k in over:
                subj[k] = over[k]
        if "dob_year" in over:
            subj["dob"] = subj["dob"].replace(year=int(over["dob_year"]))
        dob = subj["dob"]
        age = int(over.get("age", r.randint(18, 89)))
        year = int(over.get("admityear", dob.year + age))
        if "admityear" in over and "age" not in over:
            age = max(0, year - dob.year)
        elif "admityear" in over:
            dob = subj["dob"] = subj["dob"].replace(year=year - age)
        admit = datetime(year, r.randint(1, 12), r.randint(1, 28), r.randint(0, 23), r.choice([0, 15, 30, 45]))
        days = int(over.get("days_stay", r.randint(1, 20)))
        disch = admit + timedelta(days=days, hours=r.randint(0, 12))
        dod = None
        if subj["expire_flag"] or "dod_year" in over:
            subj["expire_flag"] = int(over.get("expire_flag", 1))
            dod_year = int(float(over["dod_year"])) if "dod_year" in over else disch.year + r.randint(0, 3)
            dod = datetime(max(dod_year, disch.year), r.randint(1, 12), r.randint(1, 28))
        self._hadm += r.randint(1, 50)
        hadm = self._hadm
        row = {
            "subject_id": sid,
            "hadm_id": hadm,
            "name": subj["name"],
            "marital_status": subj["marital_status"],
            "age": age,
            "dob": fmt(dob),
            "gender": subj["gender"],
            "language": subj["language"],
            "religion": subj["religion"],
            "admission_type": r.choice(vocab.ADMISSION_TYPES),
            "days_stay": days,
            "insurance": r.choice(vocab.INSURANCES),
            "ethnicity": subj["ethnicity"],
            "expire_flag": subj["expire_flag"],
            "admission_location": r.choice(vocab.ADMISSION_LOCATIONS),
            "discharge_location": "dead/expired"
            if dod and dod <= disch + timedelta(days=1)
            else r.choice(vocab.DISCHARGE_LOCATIONS[:4]),
            "diagnosis": r.choice(vocab.ADMIT_DIAGNOSES),
            "dod": fmt(dod),
            "dob_year": dob.year,
            "dod_year": float(dod.year) if dod else None,
            "admittime": fmt(admit),
            "dischtime": fmt(disch),
            "admityear": year,
        }
        for k, val in over.items():
            if k in row and k not in ("age", "admityear", "days_stay", "dob_year", "dod_year"):
                row[k] = val
        self.store.add("demographic", **row)
        return hadm

    def diagnosis(self, sid: int, hadm: int, **over: Any) -> None:
        short, long, code = self.rng.choice(self._diagnoses)
        self.store.add(
            "diagnoses",
            subject_id=sid,
            hadm_id=hadm,
            **{"icd9_code": code, "short_title": short, "long_title": long, **over},
        )

    def procedure(self, sid: int, hadm: int, **over: Any) -> None:
        short, long, code = self.rng.choice(self._procedures)
        self.store.add(
            "procedures",
            subject_id=sid,
            hadm_id=hadm,
            **{"icd9_code": code, "short_title": short, "long_title": long, **over},
        )

    def prescription(self, sid: int, hadm: int, **over: Any) -> None:
        drug, routes, dose, unit, code, dtype = self.rng.choice(self._drugs)
        route = routes[0] if len(routes) == 1 or self.rng.random() < 0.6 else self.rng.choice(routes[1:])
        self._icustay += self.rng.randint(1, 9)
        row = {
            "icustay_id": self._icustay,
            "drug_type": dtype,
            "drug": drug,
            "formulary_drug_cd": code,
            "route": route,
            "drug_dose": dose,
        }
        self.store.add("prescriptions", subject_id=sid, hadm_id=hadm, **{**row, **over})

    def lab(self, sid: int, hadm: int, **over: Any) -> None:
        label, fluid, category, unit, lo, hi = self.rng.choice(vocab.LABS)
        label = over.get("label", label)
        if "label" in over and over["label"] not in self.itemids:
            self.itemids[over["label"]] = 51500 + len(self.itemids)
        itemid = self.itemids.get(label, 51000)
        value = round(self.rng.uniform(lo, hi), 1)
        t = datetime(
            2100 + self.rng.randint(0, 90), self.rng.randint(1, 12), self.rng.randint(1, 28), self.rng.randint(0, 23)
        )
        row = {
            "itemid": itemid,
            "charttime": fmt(t),
            "flag": self.rng.choice(LAB_FLAGS),
            "value_unit": f"{value}{unit}",
            "label": label,
            "fluid": fluid,
            "category": category,
        }
        self.store.add("lab", subject_id=sid, hadm_id=hadm, **{**row, **over})

    def populate_admission(self, sid: int, hadm: int) -> None:
        r = self.rng
        for _ in range(r.randint(2, 6)):
            self.diagnosis(sid, hadm)
        for _ in range(r.randint(0, 3)):
            self.procedure(sid, hadm)
        for _ in range(r.randint(2, 8)):
            self.prescription(sid, hadm)
        for _ in range(r.randint(3, 10)):
            self.lab(sid, hadm)

    def finish(self) -> None:
        pass
