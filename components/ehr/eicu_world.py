"""eICU rows (EHRSQL layout) from the shared patient/visit model; one unit stay per hospital stay."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from components.ehr import schema_eicu as schema
from components.ehr import vocab
from components.ehr.store import TableStore
from components.ehr.timeline import fmt
from components.ehr.world import KINDS, Patient, Visit, World

MIN = timedelta(minutes=1)
LAB_INFO = {name: (lo, hi) for name, lo, hi in vocab.EICU_LABS}
DRUG_INFO = {d[0]: d for d in vocab.EICU_DRUGS}
DIAG_ICD = dict(vocab.EICU_DIAGNOSES)
WIDE_DIAG_ICD = DIAG_ICD | dict(vocab.EXTRA_EICU_DIAGNOSES)
# wide databases: every drug with the routes it is given by (the usual one first) and its dosage
WIDE_DRUGS = {d[0]: ((d[1],), d[2]) for d in vocab.EICU_DRUGS} | {d[0]: (d[1], d[2]) for d in vocab.EXTRA_EICU_DRUGS}
VITAL_RANGES = {
    "temperature": (35.8, 39.4),
    "sao2": (86, 100),
    "heartrate": (55, 125),
    "respiration": (10, 32),
    "systemicsystolic": (85, 170),
    "systemicdiastolic": (35, 95),
    "systemicmean": (55, 115),
}
INTAKE_PATH = "flowsheet|flowsheet cell labels|i&o|intake (ml)|medication input|{}"
OUTPUT_PATH = "flowsheet|flowsheet cell labels|i&o|output (ml)|{}"


class EicuWorld(World):
    kinds = KINDS + ("allergy",)
    genders = ("male", "female")
    careunits = ["micu", "sicu", "cardiac icu", "med-surg icu", "neuro icu"]
    wards = [83, 92, 185, 259, 384, 425, 549, 613, 628, 925, 996, 1036, 1063]
    admit_sources = vocab.EICU_ADMIT_SOURCES

    def __init__(self, rng: random.Random, wide: bool = False):
        """`wide`: draw background events from the wider vocabularies, drugs by several routes (generated tasks)."""
        super().__init__(rng)
        self.wide = wide
        self._diag_icd = WIDE_DIAG_ICD if wide else DIAG_ICD
        self._names = {
            "diagnosis": list(self._diag_icd),
            "drug": list(WIDE_DRUGS) if wide else [d[0] for d in vocab.EICU_DRUGS],
        }
        self.store = TableStore(schema.TABLES, schema.INDEXES)
        self._ids = {t: 0 for t in schema.TABLES}
        self._next_step_uid = 900000
        self._hospital = {w: rng.choice([63, 73, 110, 148, 167, 243, 264, 420]) for w in self.wards}

    def new_pid(self) -> str:
        while True:
            pid = f"{self.rng.randint(0, 35):03d}-{self.rng.randint(100, 99999)}"
            if pid not in self.patients:
                return pid

    def _id(self, table: str) -> int:
        self._ids[table] += 1
        return self._ids[table]

    def random_name(self, kind: str) -> str:
        r = self.rng
        return {
            "diagnosis": lambda: r.choice(self._names["diagnosis"]),
            "procedure": lambda: r.choice(vocab.EICU_TREATMENTS),
            "lab": lambda: r.choice(vocab.EICU_LABS)[0],
            "drug": lambda: r.choice(self._names["drug"]),
            "vital": lambda: r.choice(sorted(VITAL_RANGES)),
            "intake": lambda: r.choice(vocab.EICU_INTAKES),
            "output": lambda: r.choice(vocab.EICU_OUTPUTS),
            "culture": lambda: r.choice(vocab.EICU_CULTURE_SITES),
            "allergy": lambda: r.choice(vocab.EICU_ALLERGIES),
        }[kind]()

    def _cost(self, p: Patient, v: Visit, eventtype: str, eventid: int, t: datetime, name: str) -> None:
        self.store.add(
            "cost",
            costid=self._id("cost"),
            uniquepid=p.pid,
            patienthealthsystemstayid=v.hid,
            eventtype=eventtype,
            eventid=eventid,
            chargetime=fmt(t),
            cost=self.cost_of(eventtype, name),
        )

    def _emit_diagnosis(self, p, v, t, name, value, route, organism):
        name = name or self.random_name("diagnosis")
        i = self._id("diagnosis")
        self.store.add(
            "diagnosis",
            diagnosisid=i,
            patientunitstayid=v.uid,
            diagnosisname=name,
            diagnosistime=fmt(t),
            icd9code=self._diag_icd.get(name),
        )
        self._cost(p, v, "diagnosis", i, t, name)

    def _emit_procedure(self, p, v, t, name, value, route, organism):
        name = name or self.random_name("procedure")
        i = self._id("treatment")
        self.store.add("treatment", treatmentid=i, patientunitstayid=v.uid, treatmentname=name, treatmenttime=fmt(t))
        self._cost(p, v, "treatment", i, t, name)

    def _emit_lab(self, p, v, t, name, value, route, organism):
        name = name or self.random_name("lab")
        lo, hi = LAB_INFO.get(name, (1.0, 100.0))
        value = value if value is not None else round(self.rng.uniform(lo, hi), 2 if hi < 10 else 1)
        i = self._id("lab")
        self.store.add("lab", labid=i, patientunitstayid=v.uid, labname=name, labresult=value, labresulttime=fmt(t))
        self._cost(p, v, "lab", i, t, name)

    def _emit_drug(self, p, v, t, name, value, route, organism):
        name = name or self.random_name("drug")
        info = DRUG_INFO.get(name)
        if self.wide and name in WIDE_DRUGS and route is None:
            routes, dosage = WIDE_DRUGS[name]
            route = routes[0] if len(routes) == 1 or self.rng.random() < 0.6 else self.rng.choice(routes[1:])
            info = (name, route, dosage)
        route = route or (info[1] if info else self.rng.choice(["iv", "po", "oral", "subcutan", "intravenous"]))
        dosage = (
            info[2]
            if info
            else f"{self.rng.choice([1, 2, 4, 5, 10, 20, 40, 100])} {self.rng.choice(['mg', 'ml', 'mcg'])}"
        )
        stop = t + timedelta(hours=self.rng.randint(4, 96))
        if v.end is not None:
            stop = min(stop, v.end)
        i = self._id("medication")
        self.store.add(
            "medication",
            medicationid=i,
            patientunitstayid=v.uid,
            drugname=name,
            dosage=dosage,
            routeadmin=route,
            drugstarttime=fmt(t),
            drugstoptime=fmt(stop),
        )
        self._cost(p, v, "medication", i, t, name)

    def _emit_vital(self, p, v, t, name, value, route, organism):
        vals = {k: round(self.rng.uniform(lo, hi), 1) for k, (lo, hi) in VITAL_RANGES.items()}
        if name in vals and value is not None:
            vals[name] = value
        self.store.add(
            "vitalperiodic",
            vitalperiodicid=self._id("vitalperiodic"),
            patientunitstayid=v.uid,
            observationtime=fmt(t),
            **vals,
        )

    def _emit_intake(self, p, v, t, name, value, route, organism):
        name = name or self.random_name("intake")
        value = value if value is not None else float(self.rng.randint(5, 500))
        self.store.add(
            "intakeoutput",
            intakeoutputid=self._id("intakeoutput"),
            patientunitstayid=v.uid,
            cellpath=INTAKE_PATH.format(name),
            celllabel=name,
            cellvaluenumeric=value,
            intakeoutputtime=fmt(t),
        )

    def _emit_output(self, p, v, t, name, value, route, organism):
        name = name or self.random_name("output")
        value = value if value is not None else float(self.rng.randint(5, 600))
        self.store.add(
            "intakeoutput",
            intakeoutputid=self._id("intakeoutput"),
            patientunitstayid=v.uid,
            cellpath=OUTPUT_PATH.format(name),
            celllabel=name,
            cellvaluenumeric=value,
            intakeoutputtime=fmt(t),
        )

    def _emit_culture(self, p, v, t, name, value, route, organism):
        name = name or self.random_name("culture")
        org = organism or (
            self.rng.choice(
                [
                    "escherichia coli",
                    "staphylococcus aureus",
                    "klebsiella pneumoniae",
                    "pseudomonas aeruginosa",
                    "candida albicans",
                    "enterococcus faecalis",
                ]
            )
            if self.rng.random() < 0.6
            else "no growth"
        )
        self.store.add(
            "microlab",
            microlabid=self._id("microlab"),
            patientunitstayid=v.uid,
            culturesite=name,
            organism=org,
            culturetakentime=fmt(t),
        )

    def _emit_allergy(self, p, v, t, name, value, route, organism):
        name = name or self.random_name("allergy")
        drug = route or self.rng.choice([d[0] for d in vocab.EICU_DRUGS] + [""] * 4) or None
        self.store.add(
            "allergy",
            allergyid=self._id("allergy"),
            patientunitstayid=v.uid,
            drugname=drug,
            allergyname=name,
            allergytime=fmt(t),
        )

    def finish(self) -> None:
        r, s = self.rng, self.store
        for pid in sorted(self.patients):
            p = self.patients[pid]
            ethnicity = r.choice(vocab.EICU_ETHNICITIES)
            height = round(r.uniform(150, 195), 1)
            for i, v in enumerate(p.visits):
                last = i == len(p.visits) - 1
                age = v.start.year - p.birth.year - ((v.start.month, v.start.day) < (p.birth.month, p.birth.day))
                weight = round(r.uniform(45, 140), 1)
                status = (
                    None if v.end is None else ("expired" if last and (p.expired or p.dod is not None) else "alive")
                )
                common = dict(
                    uniquepid=pid,
                    patienthealthsystemstayid=v.hid,
                    gender=p.gender,
                    age=str(age),
                    ethnicity=ethnicity,
                    hospitalid=self._hospital.get(v.wardid, 73),
                    admissionheight=height,
                    hospitaladmittime=fmt(v.start),
                    hospitaladmitsource=v.admit_source,
                    hospitaldischargetime=fmt(v.end),
                    hospitaldischargestatus=status,
                )
                if p.step_down:
                    # a short step-down unit stay before the main one: eICU stays often span several units
                    self._next_step_uid += r.randint(1, 9)
                    s.add(
                        "patient",
                        **common,
                        patientunitstayid=self._next_step_uid,
                        wardid=r.choice(self.wards),
                        admissionweight=round(weight + r.uniform(-2, 2), 1),
                        dischargeweight=weight,
                        unitadmittime=fmt(v.start + 10 * MIN),
                        unitdischargetime=fmt(v.start + 50 * MIN),
                    )
                s.add(
                    "patient",
                    uniquepid=pid,
                    patienthealthsystemstayid=v.hid,
                    patientunitstayid=v.uid,
                    gender=p.gender,
                    age=str(age),
                    ethnicity=ethnicity,
                    hospitalid=self._hospital.get(v.wardid, 73),
                    wardid=v.wardid,
                    admissionheight=height,
                    admissionweight=weight,
                    dischargeweight=None if v.end is None else round(weight + r.uniform(-4, 3), 1),
                    hospitaladmittime=fmt(v.start),
                    hospitaladmitsource=v.admit_source,
                    unitadmittime=fmt(v.unit_start()),
                    unitdischargetime=fmt(v.unit_end()),
                    hospitaldischargetime=fmt(v.end),
                    hospitaldischargestatus=status,
                )
