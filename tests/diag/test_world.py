"""World models: the protocol, the statistical model's determinism and fidelity to the generator's
disease-conditioned distributions (values, correlations, conditioning on history, cultures, reports), its storage,
and the recorded (oracle) model."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from components.diag.catalogue import default_catalogue
from components.diag.cohort import CohortConfig, build_cohort
from components.diag.record import Case, ExamEvent
from components.diag.results import parse_values
from components.diag.world import (
    NOT_RECORDED,
    PriorExam,
    RecordedWorldModel,
    StatisticalWorldModel,
    WorldModel,
    first_values,
    to_scale,
)

CAT = default_catalogue()


@pytest.fixture(scope="module")
def reference() -> list[Case]:
    """A fresh draw from the same generator: the distributions the fitted model should reproduce."""
    return build_cohort(CohortConfig(patients=3000, seed=11))


def test_both_models_are_world_models(world):
    assert isinstance(world, WorldModel) and isinstance(RecordedWorldModel(), WorldModel)
    assert world.name == "statistical" and RecordedWorldModel().name == "recorded"


def test_statistical_draws_are_deterministic_given_the_seeds(world, test_cases):
    case = test_cases[0]
    assert world.simulate(case, "Basic metabolic panel", []) == world.simulate(case, "Basic metabolic panel", [])
    draws = {world.simulate(case, "Basic metabolic panel", [], seed=s) for s in range(5)}
    assert len(draws) > 1
    other = StatisticalWorldModel(world.fitted, seed=1)
    assert other.simulate(case, "Basic metabolic panel", []) != world.simulate(case, "Basic metabolic panel", [])


@pytest.mark.parametrize(("code", "exam", "analyte"), [
    ("K85.90", "Lipase", "Lipase"),
    ("I21.9", "Troponin I", "Troponin I"),
    ("E10.10", "Basic metabolic panel", "Bicarbonate"),
    ("E10.10", "Basic metabolic panel", "Glucose"),
    ("N17.9", "Basic metabolic panel", "Creatinine"),
    ("J18.9", "Complete blood count", "White blood cell count"),
    ("D50.0", "Complete blood count", "Hemoglobin"),
    ("I50.9", "B-type natriuretic peptide", "B-type natriuretic peptide"),
])
def test_simulated_results_follow_the_diseases_distribution(world, reference, code, exam, analyte):
    a = CAT.analytes[analyte]
    cases = [c for c in reference if c.icd10 == code]
    real = [to_scale(a, v[analyte]) for v in (first_values(c, CAT) for c in cases) if analyte in v]
    sim = [to_scale(a, world.sample_values(c, exam)[analyte]) for c in cases]
    fitted_on = world.fitted.diseases[code].n[world.fitted.variables.index(analyte)]
    assert len(real) >= 50 and fitted_on >= 15
    sd = statistics.stdev(real)
    # within three standard errors of the two samples (the fit's and the reference's) of the generator's mean
    assert abs(statistics.mean(sim) - statistics.mean(real)) / sd < 3 * math.sqrt(1 / fitted_on + 1 / len(real))
    assert 0.5 < statistics.variance(sim) / statistics.variance(real) < 2.0
    others = [to_scale(a, world.sample_values(c, exam)[analyte]) for c in reference[:200] if c.icd10 != code]
    assert abs(statistics.mean(sim) - statistics.mean(others)) > abs(statistics.mean(sim) - statistics.mean(real))


def test_panels_keep_their_correlations_and_derived_values(world, test_cases):
    case = next(c for c in test_cases if c.icd10 == "D50.0") if any(c.icd10 == "D50.0" for c in test_cases) \
        else test_cases[0]
    draws = [world.sample_values(case, "Complete blood count", seed=s) for s in range(60)]
    hgb, hct = [d["Hemoglobin"] for d in draws], [d["Hematocrit"] for d in draws]
    assert np.corrcoef(hgb, hct)[0, 1] > 0.95
    for s in range(20):
        v = world.sample_values(case, "Basic metabolic panel", seed=s)
        assert v["Sodium"] - v["Chloride"] - v["Bicarbonate"] == v["Anion gap"]


def test_a_lab_is_conditioned_on_the_results_already_seen(world, test_cases):
    case = test_cases[0]
    renal = ("Sodium: Value: 136; Numeric Value: 136.0\nBlood urea nitrogen: Value: 85; Numeric Value: 85.0\n"
             "Creatinine: Value: 5.10; Numeric Value: 5.1")
    normal = ("Sodium: Value: 140; Numeric Value: 140.0\nBlood urea nitrogen: Value: 12; Numeric Value: 12.0\n"
              "Creatinine: Value: 0.80; Numeric Value: 0.8")
    hi = [world.sample_values(case, "Phosphate", [PriorExam("Basic metabolic panel", renal)], seed=s)["Phosphate"]
          for s in range(40)]
    lo = [world.sample_values(case, "Phosphate", [PriorExam("Basic metabolic panel", normal)], seed=s)["Phosphate"]
          for s in range(40)]
    assert statistics.mean(hi) > statistics.mean(lo) + 0.3
    # a repeat is near the first value, not a fresh draw
    first = "Value: 310; Numeric Value: 310.0; Units: U/L"
    again = [world.sample_values(case, "Lipase", [PriorExam("Lipase", first)], seed=s)["Lipase"] for s in range(20)]
    assert 150 < statistics.median(again) < 620


def test_serum_osmolality_is_computed_from_a_known_bmp(world, test_cases):
    case = test_cases[0]
    bmp = world.simulate(case, "Basic metabolic panel", [])
    v = parse_values(bmp, CAT.exams["Basic metabolic panel"], CAT)
    osm = world.sample_values(case, "Serum osmolality", [PriorExam("Basic metabolic panel", bmp)])["Serum osmolality"]
    assert osm == round(2 * v["Sodium"] + v["Glucose"] / 18 + v["Blood urea nitrogen"] / 2.8)


def test_cultures_and_reports_come_from_the_diseases_own(world, train, reference):
    pneumonia = [c for c in reference if c.icd10 == "J18.9"]
    sim = [world.simulate(c, "Sputum culture", [], seed=s) for c in pneumonia for s in range(3)]
    real = [e.result for c in train if c.icd10 == "J18.9" for e in c.events if e.exam == "Sputum culture"]
    positive = lambda rs: sum("moderate growth" in r for r in rs) / len(rs)  # noqa: E731
    assert abs(positive(sim) - positive(real)) < 0.2 and positive(sim) > 0.3
    reports = {e.result for c in train if c.icd10 == "K85.90" for e in c.events if e.exam == "CT abdomen and pelvis"}
    case = next(c for c in reference if c.icd10 == "K85.90")
    assert {world.simulate(case, "CT abdomen and pelvis", [], seed=s) for s in range(10)} <= reports


def test_an_unseen_diagnosis_falls_back_to_all_patients(world, test_cases):
    case = test_cases[0].model_copy(update={"icd10": None, "diagnosis": "Sarcoidosis"})
    assert "Value:" in world.simulate(case, "Lipase", [])
    assert world.simulate(case, "Not an exam", []) == NOT_RECORDED.format(exam="Not an exam")


def test_save_and_load_give_the_same_draws(world, test_cases, tmp_path):
    path = world.save(tmp_path / "world.json")
    back = StatisticalWorldModel.load(path)
    for exam in ("Basic metabolic panel", "Chest X-ray", "Blood culture"):
        assert back.simulate(test_cases[1], exam, []) == world.simulate(test_cases[1], exam, [])


def test_fit_needs_cases():
    with pytest.raises(ValueError, match="no cases"):
        StatisticalWorldModel.fit([])


def test_recorded_model_returns_the_cases_own_results(cohort):
    case = next(c for c in cohort if [e.exam for e in c.events].count("Basic metabolic panel") == 2)
    bmps = [e.result for e in case.events if e.exam == "Basic metabolic panel"]
    oracle = RecordedWorldModel()
    assert oracle.simulate(case, "Basic metabolic panel", []) == bmps[0]
    assert oracle.simulate(case, "Basic metabolic panel", [PriorExam("Basic metabolic panel", bmps[0])]) == bmps[1]
    sodium = oracle.simulate(case, "Sodium", [])
    assert sodium.startswith("Value: ") and math.isclose(parse_values(sodium, CAT.exams["Sodium"], CAT)["Sodium"],
                                                          parse_values(bmps[0], CAT.exams["Basic metabolic panel"],
                                                                       CAT)["Sodium"])
    missing = next(name for name in CAT.exams if name not in {e.exam for e in case.events}
                   and CAT.exams[name].panel is None)
    assert oracle.simulate(case, missing, []) == NOT_RECORDED.format(exam=missing)


def test_recorded_model_assembles_a_panel_and_falls_back(world, test_cases):
    case = test_cases[0].model_copy(update={"events": [
        ExamEvent(time="2100-01-01 00:00:00", source="lab", label="Sodium", exam="Sodium",
                  result="Value: 131; Numeric Value: 131.0; Units: mEq/L"),
        ExamEvent(time="2100-01-01 00:00:00", source="lab", label="Creatinine", exam="Creatinine",
                  result="Value: 2.1; Numeric Value: 2.1; Units: mg/dL")]})
    text = RecordedWorldModel().simulate(case, "Basic metabolic panel", [])
    assert parse_values(text, CAT.exams["Basic metabolic panel"], CAT) == {"Sodium": 131.0, "Creatinine": 2.1}
    with_fallback = RecordedWorldModel(fallback=world)
    assert with_fallback.simulate(case, "Lipase", []) == world.simulate(case, "Lipase", [])
