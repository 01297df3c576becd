"""MIMIC-III rows (EHRSQL layout) from the shared patient/visit model."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from components.ehr import schema_mimic_iii as schema
from components.ehr import vocab
from components.ehr.store import TableStore
from components.ehr.timeline import H, fmt
from components.ehr.world import Patient, Visit, World

LAB_INFO = {label: (unit, lo, hi) for label, _f, _c, unit, lo, hi in vocab.LABS}
VITAL_INFO = {label: (unit, lo, hi) for label, unit, lo, hi in vocab.VITALS}
INPUT_INFO = {label: (lo, hi) for label, lo, hi in vocab.INPUTS}
OUTPUT_INFO = {label: (lo, hi) for label, lo, hi in vocab.OUTPUTS}
DRUG_INFO = {d[0]: d for d in vocab.DRUGS}
# wide databases: every drug with the routes it is given by (the usual one first) and its dose
WIDE_DRUGS = {d[0]: ((d[1], *vocab.EXTRA_ROUTES.get(d[0], ())), d[2], d[3]) for d in vocab.DRUGS} | {
    d[0]: (d[1], d[2], d[3]) for d in vocab.EXTRA_DRUGS
}
LINKSTO = {"vital": "chartevents", "intake": "inputevents_cv", "output": "outputevents"}


class MimicWorld(World):
    careunits = vocab.CAREUNITS
    wards = vocab.WARDS
    admit_sources = vocab.ADMISSION_LOCATIONS

    def __init__(self, rng: random.Random, wide: bool = False):
        """`wide`: draw background events from the wider vocabularies, drugs by several routes (generated tasks)."""
        super().__init__(rng)
        self.wide = wide
        self.store = TableStore(schema.TABLES, schema.INDEXES)
        self._row = {t: 0 for t in schema.TABLES}
        diagnoses = vocab.DIAGNOSES + (vocab.EXTRA_DIAGNOSES if wide else [])
        procedures = vocab.PROCEDURES + (vocab.EXTRA_PROCEDURES if wide else [])
        self.diag = {s: (c, lt) for s, lt, c in diagnoses}
        self.proc = {s: (c, lt) for s, lt, c in procedures}
        self._names = {
            "diagnosis": [d[0] for d in diagnoses],
            "procedure": [p[0] for p in procedures],
            "drug": list(WIDE_DRUGS) if wide else [d[0] for d in vocab.DRUGS],
        }
        self._codes = {c for c, _ in self.diag.values()} | {c for c, _ in self.proc.values()}
        self.labitems = {label: 50800 + i * 3 for i, (label, *_r) in enumerate(vocab.LABS)}
        self.items: dict[tuple[str, str], int] = {}
        for kind, names in (
            ("vital", [v[0] for v in vocab.VITALS]),
            ("intake", [i[0] for i in vocab.INPUTS]),
            ("output", [o[0] for o in vocab.OUTPUTS]),
        ):
            for n in names:
                self.item_id(kind, n)
        self._pid = 100

    def new_pid(self) -> int:
        self._pid += self.rng.randint(1, 40)
        while self._pid in self.patients:
            self._pid += 1
        return self._pid

    def _rid(self, table: str) -> int:
        self._row[table] += 1
        return self._row[table]

    # ---- dictionaries -------------------------------------------------------------------------------
    def _new_code(self, procedure: bool) -> str:
        while True:
            code = (
                str(self.rng.randint(10, 99)) + str(self.rng.randint(0, 99)).zfill(2)
                if procedure
                else str(self.rng.randint(100, 999)) + str(self.rng.randint(0, 99)).zfill(2)
            )
            if code not in self._codes:
                self._codes.add(code)
                return code

    def diag_code(self, name: str) -> str:
        if name not in self.diag:
            self.diag[name] = (self._new_code(False), name)
        return self.diag[name][0]

    def proc_code(self, name: str) -> str:
        if name not in self.proc:
            self.proc[name] = (self._new_code(True), name)
        return self.proc[name][0]

    def lab_id(self, name: str) -> int:
        if name not in self.labitems:
            self.labitems[name] = 51500 + len(self.labitems)
        return self.labitems[name]

    def item_id(self, kind: str, name: str) -> int:
        key = (name, LINKSTO[kind])
        if key not in self.items:
            self.items[key] = 220000 + 7 * len(self.items)
        return self.items[key]

    def random_name(self, kind: str) -> str:
        r = self.rng
        return {
            "diagnosis": lambda: r.choice(self._names["diagnosis"]),
            "procedure": lambda: r.choice(self._names["procedure"]),
            "lab": lambda: r.choice(vocab.LABS)[0],
            "drug": lambda: r.choice(self._names["drug"]),
            "vital": lambda: r.choice(vocab.VITALS[:7])[0],
            "intake": lambda: r.choice(vocab.INPUTS)[0],
            "output": lambda: r.choice(vocab.OUTPUTS)[0],
            "culture": lambda: r.choice(vocab.SPECIMENS),
        }[kind]()

    # ---- events ----------------------------------------------------------------------------------------
    def _cost(self, p: Patient, v: Visit, event_type: str, event_id: int, t: datetime, name: str) -> None:
        self.store.add(
            "cost",
            row_id=self._rid("cost"),
            subject_id=p.pid,
            hadm_id=v.hid,
            event_type=event_type,
            event_id=event_id,
            chargetime=fmt(t),
            cost=self.cost_of(event_type, name),
        )

    def _emit_diagnosis(self, p, v, t, name, value, route, organism):
        name = name or self.random_name("diagnosis")
        rid = self._rid("diagnoses_icd")
        self.store.add(
            "diagnoses_icd",
            row_id=rid,
            subject_id=p.pid,
            hadm_id=v.hid,
            icd9_code=self.diag_code(name),
            charttime=fmt(t),
        )
        self._cost(p, v, "diagnoses_icd", rid, t, name)

    def _emit_procedure(self, p, v, t, name, value, route, organism):
        name = name or self.random_name("procedure")
        rid = self._rid("procedures_icd")
        self.store.add(
            "procedures_icd",
            row_id=rid,
            subject_id=p.pid,
            hadm_id=v.hid,
            icd9_code=self.proc_code(name),
            charttime=fmt(t),
        )
        self._cost(p, v, "procedures_icd", rid, t, name)

    def _emit_lab(self, p, v, t, name, value, route, organism):
        name = name or self.random_name("lab")
        unit, lo, hi = LAB_INFO.get(name, ("", 1.0, 100.0))
        if value is None:
            value = round(self.rng.uniform(lo, hi), 2 if hi < 10 else 1)
        rid = self._rid("labevents")
        self.store.add(
            "labevents",
            row_id=rid,
            subject_id=p.pid,
            hadm_id=v.hid,
            itemid=self.lab_id(name),
            charttime=fmt(t),
            valuenum=value,
            valueuom=unit,
        )
        self._cost(p, v, "labevents", rid, t, name)

    def _emit_drug(self, p, v, t, name, value, route, organism):
        name = name or self.random_name("drug")
        info = DRUG_INFO.get(name)
        if self.wide and name in WIDE_DRUGS and route is None:
            routes, dose_val, dose_unit = WIDE_DRUGS[name]
            route = routes[0] if len(routes) == 1 or self.rng.random() < 0.6 else self.rng.choice(routes[1:])
            info = (name, route, dose_val, dose_unit)
        route = route or (info[1] if info else self.rng.choice(["po", "iv", "sc", "po/ng"]))
        dose, unit = (
            (info[2], info[3])
            if info
            else (str(self.rng.choice([1, 2, 5, 10, 20, 25, 50, 100])), self.rng.choice(["mg", "ml", "mcg"]))
        )
        end = t + timedelta(days=self.rng.randint(0, 4))
        if v.end is not None:
            end = min(end, v.end)
        rid = self._rid("prescriptions")
        self.store.add(
            "prescriptions",
            row_id=rid,
            subject_id=p.pid,
            hadm_id=v.hid,
            startdate=fmt(t),
            enddate=fmt(end),
            drug=name,
            dose_val_rx=dose,
            dose_unit_rx=unit,
            route=route,
        )
        self._cost(p, v, "prescriptions", rid, t, name)

    def _emit_vital(self, p, v, t, name, value, route, organism):
        name = name or self.random_name("vital")
        unit, lo, hi = VITAL_INFO.get(name, ("", 1.0, 100.0))
        value = value if value is not None else round(self.rng.uniform(lo, hi), 1)
        self.store.add(
            "chartevents",
            row_id=self._rid("chartevents"),
            subject_id=p.pid,
            hadm_id=v.hid,
            icustay_id=v.uid,
            itemid=self.item_id("vital", name),
            charttime=fmt(t),
            valuenum=value,
            valueuom=unit,
        )

    def _emit_intake(self, p, v, t, name, value, route, organism):
        name = name or self.random_name("intake")
        lo, hi = INPUT_INFO.get(name, (5.0, 250.0))
        value = value if value is not None else round(self.rng.uniform(lo, hi), 1)
        self.store.add(
            "inputevents_cv",
            row_id=self._rid("inputevents_cv"),
            subject_id=p.pid,
            hadm_id=v.hid,
            icustay_id=v.uid,
            charttime=fmt(t),
            itemid=self.item_id("intake", name),
            amount=value,
        )

    def _emit_output(self, p, v, t, name, value, route, organism):
        name = name or self.random_name("output")
        lo, hi = OUTPUT_INFO.get(name, (10.0, 400.0))
        value = value if value is not None else round(self.rng.uniform(lo, hi), 1)
        self.store.add(
            "outputevents",
            row_id=self._rid("outputevents"),
            subject_id=p.pid,
            hadm_id=v.hid,
            icustay_id=v.uid,
            charttime=fmt(t),
            itemid=self.item_id("output", name),
            value=value,
        )

    def _emit_culture(self, p, v, t, name, value, route, organism):
        name = name or self.random_name("culture")
        org = organism or (self.rng.choice(vocab.ORGANISMS) if self.rng.random() < 0.6 else None)
        self.store.add(
            "microbiologyevents",
            row_id=self._rid("microbiologyevents"),
            subject_id=p.pid,
            hadm_id=v.hid,
            charttime=fmt(t),
            spec_type_desc=name,
            org_name=org,
        )

    # ---- whole time lines -------------------------------------------------------------------------------
    def finish(self) -> None:
        r, s = self.rng, self.store
        for pid in sorted(self.patients, key=lambda x: (str(type(x)), x)):
            p = self.patients[pid]
            s.add(
                "patients",
                row_id=self._rid("patients"),
                subject_id=pid,
                gender=p.gender,
                dob=fmt(p.birth),
                dod=fmt(p.dod),
            )
            ethnicity, insurance, language, marital = (
                r.choice(vocab.ETHNICITIES),
                r.choice(vocab.INSURANCES),
                r.choice(vocab.LANGUAGES),
                r.choice(vocab.MARITAL),
            )
            for i, v in enumerate(p.visits):
                last = i == len(p.visits) - 1
                disch_loc = (
                    None
                    if v.end is None
                    else ("dead/expired" if last and p.dod is not None else r.choice(vocab.DISCHARGE_LOCATIONS[:4]))
                )
                age = v.start.year - p.birth.year - ((v.start.month, v.start.day) < (p.birth.month, p.birth.day))
                s.add(
                    "admissions",
                    row_id=self._rid("admissions"),
                    subject_id=pid,
                    hadm_id=v.hid,
                    admittime=fmt(v.start),
                    dischtime=fmt(v.end),
                    admission_type=r.choice(vocab.ADMISSION_TYPES),
                    admission_location=v.admit_source,
                    discharge_location=disch_loc,
                    insurance=insurance,
                    language=language,
                    marital_status=marital,
                    ethnicity=ethnicity,
                    age=age,
                )
                uin, uout = v.unit_start(), v.unit_end()
                s.add(
                    "icustays",
                    row_id=self._rid("icustays"),
                    subject_id=pid,
                    hadm_id=v.hid,
                    icustay_id=v.uid,
                    first_careunit=v.careunit,
                    last_careunit=v.careunit,
                    first_wardid=v.wardid,
                    last_wardid=v.wardid,
                    intime=fmt(uin),
                    outtime=fmt(uout),
                )
                s.add(
                    "transfers",
                    row_id=self._rid("transfers"),
                    subject_id=pid,
                    hadm_id=v.hid,
                    icustay_id=None,
                    eventtype="admit",
                    careunit=None,
                    wardid=r.choice(vocab.WARDS),
                    intime=fmt(v.start),
                    outtime=fmt(uin),
                )
                s.add(
                    "transfers",
                    row_id=self._rid("transfers"),
                    subject_id=pid,
                    hadm_id=v.hid,
                    icustay_id=v.uid,
                    eventtype="transfer",
                    careunit=v.careunit,
                    wardid=v.wardid,
                    intime=fmt(uin),
                    outtime=fmt(uout),
                )
                for k, cu in enumerate(v.extra_careunits):
                    t_in = uin + (k + 1) * 2 * H
                    s.add(
                        "transfers",
                        row_id=self._rid("transfers"),
                        subject_id=pid,
                        hadm_id=v.hid,
                        icustay_id=v.uid,
                        eventtype="transfer",
                        careunit=cu,
                        wardid=r.choice(vocab.WARDS),
                        intime=fmt(t_in),
                        outtime=fmt(uout),
                    )
                if v.end is not None:
                    s.add(
                        "transfers",
                        row_id=self._rid("transfers"),
                        subject_id=pid,
                        hadm_id=v.hid,
                        icustay_id=None,
                        eventtype="discharge",
                        careunit=None,
                        wardid=None,
                        intime=fmt(v.end),
                        outtime=None,
                    )
        for short, (code, long) in sorted(self.diag.items(), key=lambda kv: kv[1][0]):
            s.add(
                "d_icd_diagnoses",
                row_id=self._rid("d_icd_diagnoses"),
                icd9_code=code,
                short_title=short,
                long_title=long,
            )
        for short, (code, long) in sorted(self.proc.items(), key=lambda kv: kv[1][0]):
            s.add(
                "d_icd_procedures",
                row_id=self._rid("d_icd_procedures"),
                icd9_code=code,
                short_title=short,
                long_title=long,
            )
        for label, itemid in sorted(self.labitems.items(), key=lambda kv: kv[1]):
            s.add("d_labitems", row_id=self._rid("d_labitems"), itemid=itemid, label=label)
        for (label, linksto), itemid in sorted(self.items.items(), key=lambda kv: kv[1]):
            s.add("d_items", row_id=self._rid("d_items"), itemid=itemid, label=label, linksto=linksto)
