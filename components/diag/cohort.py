"""The synthetic cohort: patients, their admissions and every exam result, drawn from disease-conditioned
distributions with realistic correlations.

Per admission: a severity s (log-normal around 1) and one value of each latent factor per patient (noise). A lab's
standardized value is its gain times the loadings times the disease's factor shifts (times s) and the comorbidities'
shifts, plus the loadings times the patient's factor noise, plus the disease's direct shift (times s), plus its own
noise; derived values are computed (anion gap -> chloride, Hgb -> Hct, PT -> INR, HCO3 and pCO2 -> pH, ...). So a
disease moves its labs together, in proportion to how sick the patient is, and related labs move together in
everyone. Cultures grow the disease's organisms with a probability that rises with severity (background
contaminants otherwise); imaging reports are the disease's templates or the exam's normal report, with incidental
findings, filled with the patient's side, lobe and heart rate.

Events: the key exams first (within the first hours), then part of the disease's workup, a few routine extras,
and a repeat CBC/BMP on day two with the disease half resolved. The disease mix is allocated from the
prevalence weights (largest remainder), so no diagnosis exceeds about 5% of a cohort: far below the bound on the
best constant diagnosis, 1/min(n, 10) + 0.10. Everything is a pure function of the seed; patient i's admissions
depend on (seed, i) alone; the split is by patient (record.assign_split).
"""

from __future__ import annotations

import json
import math
import random
import time
from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from components.common.io import atomic_write
from components.diag.catalogue import Analyte, Catalogue, Disease, Exam, ExamKind, default_catalogue
from components.diag.disease_data import COMORBIDITIES, Comorbidity
from components.diag.exam_data import ORGANISM_GRAM
from components.diag.profile import fill, physical_exam, write_profile
from components.diag.record import Case, ExamEvent, assign_split, save_cases
from components.diag.results import format_lab, rounded

FACTORS = ("inflammation", "renal", "hepatocellular", "cholestasis", "liver_synthetic", "anemia", "bleeding",
           "acidosis", "ketosis", "hypoperfusion", "hypoxia", "hypercapnia", "myocardial", "cardiac_stretch",
           "hyperglycemia", "dehydration", "hyponatremia", "thyroid", "iron_deficiency", "b12_deficiency",
           "urinary_infection", "csf_inflammation", "thrombosis", "pancreatic")
FACTOR_NOISE = 0.7  # sd of a patient's own factor values
REPEAT_EFFECT = 0.5  # how much of the disease is left on day two
ROUTINE = ("Complete blood count", "Basic metabolic panel", "Magnesium", "Phosphate", "Coagulation panel", "Urinalysis",
           "Lactate", "Hemoglobin A1c", "Lipid panel", "Troponin I", "Chest X-ray", "Electrocardiogram",
           "Thyroid stimulating hormone", "Hepatic function panel")
REPEATED = ("Complete blood count", "Basic metabolic panel")
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


class CohortConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    patients: int = Field(default=200, ge=1)
    seed: int = 0
    test_fraction: float = Field(default=0.2, ge=0, le=1)
    valid_fraction: float = Field(default=0.0, ge=0, le=1, description="patients in the valid split, taken from "
                                  "train (the diag pipeline needs one)")
    readmission_rate: float = Field(default=0.15, ge=0, le=1, description="patients with a second admission")
    workup_probability: float = Field(default=0.6, ge=0, le=1, description="each workup exam's chance to be recorded")
    routine_probability: float = Field(default=0.12, ge=0, le=1, description="each routine extra's chance")
    repeat_probability: float = Field(default=0.7, ge=0, le=1, description="a day-two repeat of an ordered CBC/BMP")

    @model_validator(mode="after")
    def _splits_fit(self) -> CohortConfig:
        if self.test_fraction + self.valid_fraction > 1:
            raise ValueError(f"test_fraction {self.test_fraction} + valid_fraction {self.valid_fraction} exceed 1")
        return self


class CohortReport(BaseModel):
    cases: int
    patients: int
    splits: dict[str, int]
    diseases: dict[str, int]
    events: int
    seconds: float
    config: CohortConfig


def build_cohort(config: CohortConfig, catalogue: Catalogue | None = None) -> list[Case]:
    cat = catalogue or default_catalogue()
    diseases = list(cat.diseases.values())
    check_recipes(cat)
    allocation = allocate(diseases, config.patients, random.Random(f"diag-cohort:{config.seed}:allocation"))
    cases: list[Case] = []
    for index, disease in enumerate(allocation):
        cases.extend(_patient(cat, config, index, disease, diseases))
    return cases


def write_cohort(out_dir: Path | str, config: CohortConfig, catalogue: Catalogue | None = None) -> CohortReport:
    """cases.jsonl and cohort.json (the counts and the config) under `out_dir`, each written atomically."""
    out = Path(out_dir)
    started = time.perf_counter()
    cases = build_cohort(config, catalogue)
    save_cases(out / "cases.jsonl", cases)
    report = CohortReport(cases=len(cases), patients=len({c.patient_id for c in cases}),
                          splits=dict(sorted(Counter(c.split for c in cases).items())),
                          diseases=dict(Counter(c.diagnosis for c in cases).most_common()),
                          events=sum(len(c.events) for c in cases), seconds=round(time.perf_counter() - started, 3),
                          config=config)
    with atomic_write(out / "cohort.json") as fh:
        fh.write(json.dumps(report.model_dump(mode="json"), indent=2))
    return report


def allocate(diseases: list[Disease], n: int, rng: random.Random) -> list[Disease]:
    """n first admissions split over the diseases in proportion to their prevalence (largest remainder), shuffled."""
    total = sum(d.prevalence for d in diseases)
    quotas = [d.prevalence * n / total for d in diseases]
    counts = [math.floor(q) for q in quotas]
    for i in sorted(range(len(diseases)), key=lambda i: (counts[i] - quotas[i], i))[: n - sum(counts)]:
        counts[i] += 1
    out = [d for d, k in zip(diseases, counts, strict=True) for _ in range(k)]
    rng.shuffle(out)
    return out


def check_recipes(cat: Catalogue) -> None:
    """Every comorbidity a disease names exists; every factor it shifts is one the labs load on."""
    known = {c.name for c in COMORBIDITIES}
    for d in cat.diseases.values():
        for name in (*d.risks, *d.excludes):
            if name not in known:
                raise ValueError(f"disease {d.code}: unknown comorbidity {name!r}")
        for f in d.factors:
            if f not in FACTORS:
                raise ValueError(f"disease {d.code}: unknown factor {f!r}")
    for a in (*cat.analytes.values(), *cat.vitals.values()):
        for f in a.loadings:
            if f not in FACTORS:
                raise ValueError(f"analyte {a.name}: unknown factor {f!r}")


# ------------------------------------------------------------------------------------------------ one patient


def _patient(cat: Catalogue, config: CohortConfig, index: int, first: Disease, diseases: list[Disease]) -> list[Case]:
    rng = random.Random(f"diag-cohort:{config.seed}:patient:{index}")
    patient_id = f"P{index:05d}"
    split = assign_split(patient_id, config.seed, config.test_fraction, config.valid_fraction)
    age = int(min(max(round(rng.gauss(*first.age)), 18), 95))
    sex = "M" if rng.random() < first.male else "F"
    start = datetime(2110 + rng.randint(0, 8), 1, 1) + timedelta(days=rng.randint(0, 364), minutes=rng.randint(0, 1439))
    admissions = [(first, age, start, [])]
    if rng.random() < config.readmission_rate:
        second = _weighted(rng, {d.code: d.prevalence for d in diseases if d.code != first.code})
        gap = rng.randint(300, 1500)
        admissions.append((cat.diseases[second], min(age + gap // 365, 95), start + timedelta(days=gap),
                           [f"admission for {first.name.lower()} in {start.year}"]))
    comorbidities = _comorbidities(rng, first, age, sex)
    cases = []
    for k, (disease, age_k, t0, prior) in enumerate(admissions, start=1):
        comorb = [c for c in comorbidities if c.name not in disease.excludes]
        comorb += [c for c in _comorbidities(rng, disease, age_k, sex, only_risks=True)
                   if c.name not in {x.name for x in comorb}]
        cases.append(_admission(cat, config, rng, disease, f"{patient_id}-A{k}", patient_id, split, age_k, sex,
                                comorb, prior, t0))
    return cases


def _comorbidities(rng: random.Random, disease: Disease, age: int, sex: str, only_risks: bool = False) -> list[Comorbidity]:
    out = []
    for c in COMORBIDITIES:
        if c.name in disease.excludes or (c.sex is not None and c.sex != sex):
            continue
        if c.name in disease.risks:
            p = disease.risks[c.name]
        elif only_risks:
            continue
        else:
            p = c.prevalence * (min(max((age - 20) / 45, 0.1), 1.6) if c.with_age else 1.0)
        if rng.random() < p:
            out.append(c)
    return out


def _admission(cat: Catalogue, config: CohortConfig, rng: random.Random, disease: Disease, case_id: str,
               patient_id: str, split: str, age: int, sex: str, comorbidities: list[Comorbidity],
               prior: list[str], t0: datetime) -> Case:
    severity = min(max(rng.lognormvariate(0.0, 0.35), 0.4), 2.2)
    noise = {f: rng.gauss(0.0, FACTOR_NOISE) for f in FACTORS}
    own = {name: rng.gauss(0.0, 1.0) for name in (*cat.analytes, *cat.vitals)}
    comorb_factors = _sum_maps(c.factors for c in comorbidities)
    comorb_direct = _sum_maps(c.analytes for c in comorbidities)

    def state(effect: float, own_noise: Mapping[str, float]) -> dict[str, float]:
        shifts = {f: disease.factors.get(f, 0.0) * severity * effect + comorb_factors.get(f, 0.0) for f in FACTORS}
        direct = {a: disease.analytes.get(a, 0.0) * severity * effect + comorb_direct.get(a, 0.0)
                  for a in set(disease.analytes) | set(comorb_direct)}
        return lab_values(cat, shifts, noise, own_noise, direct, sex == "F")

    values = state(1.0, own)
    slots = _slots(rng, values)
    history = [h for h, p in disease.history if rng.random() < p] + prior
    exam = physical_exam(rng, disease, slots, values)
    profile = write_profile(rng, disease, age, sex, comorbidities, history, slots, exam)
    key = list(disease.key) + [e for e in disease.key_optional if rng.random() < 0.5]

    timed: list[tuple[datetime, str, str]] = []  # (time, exam, which state)
    t = t0 + timedelta(minutes=rng.randint(10, 40))
    for name in key:
        timed.append((t, name, "admission"))
        t += timedelta(minutes=rng.randint(3, 20))
    ordered = set(key)
    for name in disease.workup:
        if name not in ordered and rng.random() < config.workup_probability:
            timed.append((t0 + timedelta(minutes=rng.randint(180, 720)), name, "admission"))
            ordered.add(name)
    for name in ROUTINE:
        if name not in ordered and rng.random() < config.routine_probability:
            timed.append((t0 + timedelta(minutes=rng.randint(180, 900)), name, "admission"))
            ordered.add(name)
    day_two = None
    for name in REPEATED:
        if name in ordered and rng.random() < config.repeat_probability:
            if day_two is None:
                day_two = state(REPEAT_EFFECT, {a: 0.6 * v + 0.8 * rng.gauss(0.0, 1.0) for a, v in own.items()})
            timed.append((t0 + timedelta(hours=24, minutes=rng.randint(0, 240)), name, "day_two"))
    timed.sort(key=lambda item: item[0])
    events = []
    for when, name, which in timed:
        ex = cat.exams[name]
        result = exam_result(rng, cat, ex, disease, severity, values if which == "admission" else day_two, slots)
        events.append(ExamEvent(time=when.strftime(TIME_FORMAT), source=ex.source, label=ex.name, exam=ex.name,
                                result=result))
    return Case(case_id=case_id, patient_id=patient_id, split=split, source="synthetic", profile=profile, age=age,
                sex=sex, physical_exam=exam, diagnosis=disease.name, icd10=disease.code, key_exams=key, events=events,
                metadata={"presentation": disease.presentation, "severity": round(severity, 3),
                          "comorbidities": [c.name for c in comorbidities], "admission": int(case_id.rsplit("A", 1)[1])})


# ------------------------------------------------------------------------------------------------ values and results


def lab_values(cat: Catalogue, shifts: Mapping[str, float], noise: Mapping[str, float], own: Mapping[str, float],
               direct: Mapping[str, float], female: bool) -> dict[str, float]:
    """Every analyte's and vital sign's reported value for one patient state (see the module docstring)."""
    out: dict[str, float] = {}
    analytes: list[Analyte] = [*cat.analytes.values(), *cat.vitals.values()]
    for a in analytes:
        if a.derive is not None:
            continue
        disease_part = sum(w * shifts.get(f, 0.0) for f, w in a.loadings.items())
        patient_part = sum(w * noise.get(f, 0.0) for f, w in a.loadings.items())
        z = a.gain * disease_part + patient_part + direct.get(a.name, 0.0) + a.idio * own[a.name]
        z += a.female if female else 0.0
        if a.ordinal:
            out[a.name] = float(sum(z > cut for cut in a.cuts))
            continue
        value = a.mean + a.sd * z
        out[a.name] = rounded(a, math.exp(value) if a.log else value)
    for a in analytes:
        if a.derive is not None:
            out[a.name] = rounded(a, a.derive(out) * math.exp(a.idio * own[a.name]))
    return out


def exam_result(rng: random.Random, cat: Catalogue, exam: Exam, disease: Disease, severity: float,
                values: Mapping[str, float], slots: Mapping[str, object]) -> str:
    if exam.kind in (ExamKind.LAB, ExamKind.PANEL):
        return format_lab(exam, values, cat)
    if exam.kind == ExamKind.MICROBIOLOGY:
        return _micro(rng, exam, disease, severity)
    return _imaging(rng, exam, disease, severity, slots)


def _micro(rng: random.Random, exam: Exam, disease: Disease, severity: float) -> str:
    spec = disease.micro.get(exam.name)
    if spec is not None and rng.random() < 1 - (1 - spec[0]) ** severity:
        organism = _weighted(rng, spec[1])
        return exam.positive.format(organism=organism, gram=ORGANISM_GRAM.get(organism, "organisms seen"),
                                    sets=rng.choice((1, 2)))
    for p, text in exam.background:
        if rng.random() < p:
            return text
    return exam.normal


def _imaging(rng: random.Random, exam: Exam, disease: Disease, severity: float, slots: Mapping[str, object]) -> str:
    spec = disease.imaging.get(exam.name)
    text = exam.normal
    if spec is not None and rng.random() < 1 - (1 - spec[0]) ** severity:
        text = rng.choice(spec[1])
    extra = [sentence for p, sentence in exam.incidental if rng.random() < p]
    if extra:
        findings, sep, impression = text.partition("\nIMPRESSION:")
        text = f"{findings} {' '.join(extra)}{sep}{impression}"
    return fill(text, slots)


def _slots(rng: random.Random, values: Mapping[str, float]) -> dict[str, object]:
    side = rng.choice(("left", "right"))
    other = "right" if side == "left" else "left"
    hr = int(values["Heart rate"])
    rhythm = "Sinus tachycardia" if hr > 100 else "Sinus bradycardia" if hr < 60 else "Sinus rhythm"
    return {"side": side, "Side": side.capitalize(), "other": other, "Other": other.capitalize(),
            "lobe": rng.choice(("upper", "middle", "lower") if side == "right" else ("upper", "lower")),
            "size": f"{rng.uniform(1.5, 4.5):.1f}", "hr": hr, "rhythm": rhythm, "ef": rng.randint(20, 45),
            "wall": rng.choice(("anterior", "inferior", "lateral", "anteroseptal"))}


def _weighted(rng: random.Random, weights: Mapping[str, float]) -> str:
    items = list(weights.items())
    pick = rng.random() * sum(w for _, w in items)
    for name, w in items:
        pick -= w
        if pick < 0:
            return name
    return items[-1][0]


def _sum_maps(maps) -> dict[str, float]:
    out: dict[str, float] = {}
    for m in maps:
        for k, v in m.items():
            out[k] = out.get(k, 0.0) + v
    return out
