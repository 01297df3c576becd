"""The synthetic cohort: deterministic by seed, split by patient, time-ordered events with the key exams first,
profiles that never name the diagnosis, disease-conditioned and correlated results, a disease mix within the
constant-diagnosis bound, a valid split carved out of train, and an atomic JSONL round trip."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from datetime import datetime

import numpy as np
import pytest
from pydantic import ValidationError

from components.common.io import RecordError
from components.diag.catalogue import default_catalogue
from components.diag.cohort import CohortConfig, build_cohort, write_cohort
from components.diag.record import SPLITS, load_cases, save_cases
from components.diag.validation import diagnosis_leak
from components.diag.world import first_values
from components.tasks.spread import spread_bound
from tests.diag.conftest import COHORT

CAT = default_catalogue()


def _dump(cases):
    return [c.model_dump(mode="json") for c in cases]


def test_same_seed_same_cohort_other_seed_other_cohort():
    a, b = build_cohort(CohortConfig(patients=60, seed=3)), build_cohort(CohortConfig(patients=60, seed=3))
    assert _dump(a) == _dump(b)
    assert _dump(build_cohort(CohortConfig(patients=60, seed=4))) != _dump(a)


def test_a_patient_does_not_change_when_the_cohort_grows():
    small = {c.case_id: c for c in build_cohort(CohortConfig(patients=40, seed=3))}
    large = {c.case_id: c for c in build_cohort(CohortConfig(patients=80, seed=3))}
    # a patient is a function of (seed, index, first disease): where the allocation gave the same first disease,
    # every admission is the same
    same = [p for p in {c.patient_id for c in small.values()}
            if small[f"{p}-A1"].diagnosis == large[f"{p}-A1"].diagnosis]
    assert same
    for p in same:
        assert [c for c in small.values() if c.patient_id == p] == [c for c in large.values() if c.patient_id == p]


def test_split_is_by_patient(cohort):
    splits: dict[str, set[str]] = {}
    for c in cohort:
        splits.setdefault(c.patient_id, set()).add(c.split)
    assert all(len(s) == 1 for s in splits.values())
    readmitted = [p for p, n in Counter(c.patient_id for c in cohort).items() if n > 1]
    assert len(readmitted) > 30  # the split is tested on patients with several admissions
    share = sum(next(iter(s)) == "test" for s in splits.values()) / len(splits)
    assert 0.12 < share < 0.28


def test_a_valid_split_is_by_patient_and_taken_from_train_only(cohort):
    with_valid = build_cohort(COHORT.model_copy(update={"valid_fraction": 0.2}))
    by_patient: dict[str, set[str]] = {}
    for c in with_valid:
        by_patient.setdefault(c.patient_id, set()).add(c.split)
    assert all(len(s) == 1 for s in by_patient.values())  # train, valid and test disjoint by patient
    patients = {s: {p for p, (split,) in by_patient.items() if split == s} for s in SPLITS}
    assert 0.12 < len(patients["valid"]) / len(by_patient) < 0.28
    before = {c.case_id: c.split for c in cohort}
    assert all(before[c.case_id] == "train" for c in with_valid if c.split == "valid")  # no test patient moved
    assert [c for c in with_valid if c.split == "test"] == [c for c in cohort if c.split == "test"]
    with pytest.raises(ValidationError, match="test_fraction 0.5 \\+ valid_fraction 0.6 exceed 1"):
        CohortConfig(test_fraction=0.5, valid_fraction=0.6)


def test_events_are_time_ordered_and_start_with_the_key_exams(cohort):
    for c in cohort:
        times = [datetime.fromisoformat(e.time) for e in c.events]
        assert times == sorted(times)
        assert [e.exam for e in c.events[: len(c.key_exams)]] == c.key_exams
        assert all(e.exam in CAT.exams and e.source == CAT.exams[e.exam].source for e in c.events)


def test_profiles_have_every_section_and_never_name_the_diagnosis(cohort):
    for c in cohort:
        for section in ("Patient Information", "Chief Complaint", "History of Present Illness",
                        "Past Medical History", "Physical Examination", "Vital signs"):
            assert section in c.profile
        assert diagnosis_leak(c.profile, c.diagnosis, c.icd10, CAT) == "", c.case_id
        assert c.icd10 not in c.profile


def test_disease_mix_keeps_the_best_constant_diagnosis_within_the_bound(cohort, test_cases):
    assert len({c.icd10 for c in cohort}) == len(CAT.diseases)
    for group in (cohort, test_cases):
        top = Counter(c.icd10 for c in group).most_common(1)[0][1] / len(group)
        assert top <= spread_bound(len({c.icd10 for c in group}))
        assert top < 0.1


def _values(cases, analyte):
    return [v[analyte] for v in (first_values(c, CAT) for c in cases) if analyte in v]


def test_results_follow_the_disease(cohort):
    by = lambda code: [c for c in cohort if c.icd10 == code]  # noqa: E731
    others = [c for c in cohort if c.icd10 != "K85.90"]
    assert statistics.median(_values(by("K85.90"), "Lipase")) > 3 * 60
    assert statistics.median(_values(others, "Lipase")) < 60
    assert statistics.median(_values(by("I21.9"), "Troponin I")) > 0.04
    assert statistics.median(_values(by("E10.10"), "Bicarbonate")) < 18
    assert statistics.median(_values(by("E10.10"), "Glucose")) > 250
    assert statistics.median(_values(by("N17.9"), "Creatinine")) > 1.5
    assert statistics.median(_values(by("D50.0"), "Mean corpuscular volume")) < 80
    assert statistics.median(_values(by("E05.90"), "Thyroid stimulating hormone")) < 0.4
    cultures = [e.result for c in by("N39.0") for e in c.events if e.exam == "Urine culture"]
    assert sum("CFU/mL" in r for r in cultures) / len(cultures) > 0.6
    ctpa = [e.result for c in by("I26.99") for e in c.events if e.exam == "CT pulmonary angiography"]
    assert sum("filling defect" in r.lower() and "No filling defect" not in r for r in ctpa) / len(ctpa) > 0.8


def test_related_labs_move_together(cohort):
    pairs = [first_values(c, CAT) for c in cohort]

    def corr(a, b):
        xs = [(p[a], p[b]) for p in pairs if a in p and b in p]
        return float(np.corrcoef(np.log([x for x, _ in xs]), np.log([y for _, y in xs]))[0, 1])

    assert corr("Hemoglobin", "Hematocrit") > 0.95
    assert corr("Blood urea nitrogen", "Creatinine") > 0.5
    assert corr("White blood cell count", "Neutrophils") > 0.3
    for v in pairs:  # derived values agree with their inputs
        if {"Sodium", "Chloride", "Bicarbonate", "Anion gap"} <= set(v):
            assert v["Sodium"] - v["Chloride"] - v["Bicarbonate"] == v["Anion gap"]


def test_severity_moves_a_diseases_labs_together(cohort):
    mi = [c for c in cohort if c.icd10 == "I21.9"]
    rows = [(c.metadata["severity"], first_values(c, CAT)["Troponin I"]) for c in mi]
    assert np.corrcoef([s for s, _ in rows], np.log([t for _, t in rows]))[0, 1] > 0.3


def test_write_cohort_round_trips_and_reports(tmp_path):
    report = write_cohort(tmp_path / "out", CohortConfig(patients=30, seed=1))
    cases = load_cases(tmp_path / "out" / "cases.jsonl")
    assert report.cases == len(cases) and sum(report.splits.values()) == len(cases)
    assert json.loads((tmp_path / "out" / "cohort.json").read_text())["config"]["seed"] == 1
    assert cases == build_cohort(CohortConfig(patients=30, seed=1))
    assert [p.name for p in (tmp_path / "out").iterdir() if p.name.startswith(".")] == []  # no temp files left
    assert load_cases(tmp_path / "out" / "cases.jsonl", split="test") == [c for c in cases if c.split == "test"]


def test_a_bad_case_line_names_file_line_and_field(tmp_path):
    path = tmp_path / "cases.jsonl"
    good = build_cohort(CohortConfig(patients=2, seed=0))
    save_cases(path, good)
    bad = good[0].model_dump(mode="json")
    bad["key_exams"] = []
    path.write_text(path.read_text() + json.dumps(bad) + "\n")
    with pytest.raises(RecordError, match=rf"cases.jsonl, line {len(good) + 1}, field 'key_exams'"):
        load_cases(path)
