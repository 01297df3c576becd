"""The Great Expectations suite for case files: a generated cohort passes; each kind of bad row is named; a
cohort whose diagnoses cluster fails the constant-diagnosis bound."""

from __future__ import annotations

import json

from components.diag.cohort import CohortConfig, build_cohort, write_cohort
from components.diag.importer import import_diaggym
from components.diag.record import save_cases
from components.diag.validation import validate_cases
from tests.diag.conftest import write_diaggym


def test_a_generated_cohort_and_an_import_pass(tmp_path):
    write_cohort(tmp_path / "gen", CohortConfig(patients=150, seed=2))
    report = validate_cases(tmp_path / "gen" / "cases.jsonl")
    assert report.success, report.failures
    (whole, *_) = report.constant_diagnosis
    assert whole.scope == "all" and whole.cases >= 100 and whole.within_bound and whole.best_share < 0.1
    import_diaggym(write_diaggym(tmp_path / "src.json"), tmp_path / "imp")
    assert validate_cases(tmp_path / "imp" / "cases.jsonl").success


def test_bad_rows_are_named_by_expectation_and_line(tmp_path):
    rows = [c.model_dump(mode="json") for c in build_cohort(CohortConfig(patients=12, seed=0))]
    rows[1]["case_id"] = rows[0]["case_id"]
    rows[2]["profile"] += f"\nAssessment: {rows[2]['diagnosis']}"
    other = next(r for r in rows[3:] if r["patient_id"] != rows[3]["patient_id"])
    rows[3]["patient_id"], rows[3]["split"] = other["patient_id"], "test" if other["split"] == "train" else "train"
    rows[4]["events"] = list(reversed(rows[4]["events"]))
    rows[5]["key_exams"] = ["Full body MRI"]
    rows[6]["icd10"] = "pneumonia"
    del rows[7]["events"]
    rows[8]["events"][0]["source"] = "lab_results"
    rows[9]["split"] = "dev"
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = validate_cases(path)
    assert not report.success
    failed = {(f.expectation, f.column): f for f in report.failures}
    expected = {
        ("expect_column_values_to_be_unique", "case_id"): "line 1",
        ("expect_column_values_to_be_in_set", "leak_synthetic"): "line 3",
        ("expect_column_values_to_be_in_set", "patient_splits"): "line 4",
        ("expect_column_values_to_be_in_set", "event_order"): "line 5",
        ("expect_column_values_to_be_in_set", "unknown_key_exams"): "line 6",
        ("expect_column_values_to_match_regex", "icd10_text"): "line 7",
        ("expect_column_values_to_be_in_set", "missing_fields"): "line 8",
        ("expect_column_values_to_be_in_set", "bad_events"): "line 9",
        ("expect_column_values_to_be_in_set", "split"): "line 10",
    }
    for key, line in expected.items():
        assert key in failed, key
        assert any(u.startswith(line + ":") for u in failed[key].unexpected), (key, failed[key].unexpected)


def test_a_cohort_of_one_diagnosis_fails_the_constant_bound(tmp_path):
    cases = [c for c in build_cohort(CohortConfig(patients=120, seed=5))]
    skewed = [c.model_copy(update={"diagnosis": "Acute appendicitis", "icd10": "K35.80"}) if i % 2 else c
              for i, c in enumerate(cases)]
    path = tmp_path / "cases.jsonl"
    save_cases(path, skewed)
    report = validate_cases(path)
    bound = [f for f in report.failures if "constant diagnosis" in f.expectation]
    assert not report.success and bound and "'Acute appendicitis' accepted on" in bound[0].unexpected[0]
