"""World-model fidelity on held-out cases: the recorded oracle is exact, the statistical model close, deliberately
bad models (constant, shifted by 3 sd, another disease's results) are caught; the contradiction rule on single
results; the card and its files; the `medgym diag fidelity` command's wiring and the tracked stage."""

from __future__ import annotations

import contextlib
import json
import math

import pytest
from typer.testing import CliRunner

from components.diag.catalogue import ExamKind, default_catalogue
from components.diag.fidelity import (
    ContradictionRules,
    FidelityReport,
    card,
    compare_values,
    demanded_directions,
    diversity,
    evaluate_fidelity,
    load_card,
    write_card,
)
from components.diag.profile import fill
from components.diag.results import format_lab, parse_values, rounded
from components.diag.world import RecordedWorldModel, from_scale, to_scale
from components.profile.config import PipelineConfig

CAT = default_catalogue()
LABS = (ExamKind.LAB, ExamKind.PANEL)
SLOTS = {"side": "right", "Side": "Right", "other": "left", "Other": "Left", "lobe": "lower", "size": "2.0", "hr": 80,
         "rhythm": "Sinus rhythm", "ef": 35, "wall": "anterior"}


class ConstantWorld:
    """Every lab at its healthy mean, every report the exam's normal one."""

    name = "constant"

    def simulate(self, case, exam, history, *, seed=0):
        ex = CAT.exams[exam]
        if ex.kind in LABS:
            return format_lab(ex, {a: from_scale(CAT.analytes[a], CAT.analytes[a].mean) for a in ex.analytes}, CAT)
        return fill(ex.normal, SLOTS)


class ShiftedWorld:
    """The recorded results with every lab value moved up by `sd` healthy standard deviations (on its scale)."""

    def __init__(self, sd: float = 3.0):
        self.name, self.sd, self.oracle = f"shifted+{sd:g}sd", sd, RecordedWorldModel()

    def simulate(self, case, exam, history, *, seed=0):
        text = self.oracle.simulate(case, exam, history, seed=seed)
        ex = CAT.exams[exam]
        if ex.kind not in LABS:
            return text
        values = parse_values(text, ex, CAT)
        moved = {name: rounded(a, from_scale(a, to_scale(a, v) + self.sd * a.sd))
                 for name, v in values.items() for a in [CAT.analytes[name]]}
        return format_lab(ex, moved, CAT)


class OtherDiseaseWorld:
    """The statistical model asked about a different disease: results typical of the wrong diagnosis."""

    name = "other-disease"

    def __init__(self, world):
        codes = sorted(CAT.diseases)
        self.world = world
        self.other = {c: codes[(i + len(codes) // 2) % len(codes)] for i, c in enumerate(codes)}

    def simulate(self, case, exam, history, *, seed=0):
        swapped = case.model_copy(update={"icd10": self.other.get(case.icd10, case.icd10)})
        return self.world.simulate(swapped, exam, history, seed=seed)


@pytest.fixture(scope="module")
def reports(world, test_cases) -> dict[str, FidelityReport]:
    models = (RecordedWorldModel(), world, ConstantWorld(), ShiftedWorld(3.0), OtherDiseaseWorld(world))
    return {m.name: evaluate_fidelity(m, test_cases) for m in models}


def test_the_recorded_oracle_reproduces_the_held_out_results(reports, test_cases):
    oracle = reports["recorded"]
    assert oracle.cases == len(test_cases)
    assert oracle.results == sum(1 for c in test_cases for e in c.events if e.exam in CAT.exams)
    assert oracle.analytes_scored >= 30
    assert oracle.wasserstein_mean == pytest.approx(0.0, abs=1e-9) and oracle.wasserstein_median == pytest.approx(0.0)
    assert oracle.variance_ratio_mean == pytest.approx(1.0) and oracle.variance_ratio_median == pytest.approx(1.0)
    assert oracle.text_sim == oracle.text_real and oracle.text_sim.reports > 50
    assert oracle.contradictions == oracle.real_contradictions
    assert oracle.contradictions.lab_checked > 100 and oracle.contradictions.text_checked > 50


def test_the_statistical_model_is_close_but_not_exact(reports):
    stat, oracle = reports["statistical"], reports["recorded"]
    assert stat.analytes_scored == oracle.analytes_scored
    assert math.isfinite(stat.wasserstein_mean) and 0.05 < stat.wasserstein_mean < 0.6
    assert 0.6 < stat.variance_ratio_median < 1.6
    # its reports are drawn from the train split's own: about as varied as the real ones
    assert abs(stat.text_sim.distinct2 - stat.text_real.distinct2) < 0.05
    assert abs(stat.contradictions.rate - stat.real_contradictions.rate) < 0.03


def test_a_constant_world_has_no_spread_and_says_the_same_thing_every_time(reports):
    const, stat = reports["constant"], reports["statistical"]
    assert const.variance_ratio_median < 0.05
    assert const.wasserstein_mean > 2 * stat.wasserstein_mean
    assert const.text_sim.unique_share < 0.5 * const.text_real.unique_share
    assert const.contradictions.rate > 3 * const.real_contradictions.rate  # every lab normal, every report too


def test_a_shifted_world_is_far_away_with_the_right_spread(reports):
    shifted, stat = reports["shifted+3sd"], reports["statistical"]
    assert shifted.wasserstein_median > 1.0 and shifted.wasserstein_mean > 4 * stat.wasserstein_mean
    assert 0.5 < shifted.variance_ratio_median < 2.0
    assert shifted.text_sim == shifted.text_real


def test_results_of_another_disease_contradict_the_diagnosis_more(reports):
    other, stat = reports["other-disease"], reports["statistical"]
    assert other.contradictions.rate > stat.contradictions.rate + 0.1
    assert other.contradictions.text_contradicting > 3 * max(stat.contradictions.text_contradicting, 1)
    assert other.wasserstein_mean > stat.wasserstein_mean


class UnreadableWorld:
    """Text that no parser or template reads: nothing is checked, so nothing contradicts."""

    name = "unreadable"

    def simulate(self, case, exam, history, *, seed=0):
        return "lorem ipsum"


def test_per_case_consistency_pairs_world_models_and_an_unreadable_one_scores_nothing(reports, test_cases):
    oracle, stat, other = reports["recorded"], reports["statistical"], reports["other-disease"]
    assert set(oracle.case_consistency) <= {c.case_id for c in test_cases} and oracle.case_consistency
    assert all(0.0 <= v <= 1.0 for r in (oracle, stat, other) for v in r.case_consistency.values())
    mean = {n: sum(r.case_consistency.values()) / len(r.case_consistency) for n, r in reports.items()}
    # the recorded results are consistent up to the real data's own contradictions
    assert mean["recorded"] == pytest.approx(1 - oracle.real_contradictions.rate, abs=0.05)
    assert mean["other-disease"] < mean["statistical"] - 0.1
    blank = evaluate_fidelity(UnreadableWorld(), test_cases)
    assert blank.contradictions.rate in (None, 0.0)  # the pooled rate alone would call it perfect
    assert set(blank.case_consistency) == set(oracle.case_consistency)
    assert all(v == 0.0 for v in blank.case_consistency.values())


def test_compare_values_standardizes_by_the_real_values():
    a = CAT.analytes["Sodium"]
    real = [130.0, 134.0, 138.0, 142.0, 146.0]
    sd = 6.324555320336759  # sample sd of `real`
    same = compare_values(a, real, real)
    assert same.wasserstein == 0.0 and same.variance_ratio == 1.0
    up = compare_values(a, real, [v + sd for v in real])
    assert up.wasserstein == pytest.approx(1.0) and up.variance_ratio == pytest.approx(1.0)
    flat = compare_values(a, real, [138.0] * 5)
    assert flat.variance_ratio == 0.0 and flat.wasserstein == pytest.approx(4.8 / sd)  # mean |x - 138| / sd
    assert compare_values(a, real, []).wasserstein is None
    # a dipstick that never varies in the record is measured in the catalogue's sd
    nitrite = CAT.analytes["Urine nitrite"]
    never = compare_values(nitrite, [0.0] * 20, [1.0] * 20)
    assert never.wasserstein == pytest.approx(1.0 / nitrite.sd) and never.variance_ratio is None


def test_diversity_counts_bigrams_and_repeats():
    d = diversity(["no growth", "no growth", "gram positive cocci"])
    assert d.reports == 3 and d.unique_share == pytest.approx(2 / 3) and d.distinct2 == pytest.approx(3 / 4)
    assert diversity([]).distinct2 is None and diversity([]).unique_share is None


def test_the_contradiction_rule_on_single_results():
    rules = ContradictionRules(CAT)
    pe, mi, pneumonia = CAT.diseases["I26.99"], CAT.diseases["I21.9"], CAT.diseases["J18.9"]
    assert demanded_directions(CAT, pe)["D-dimer"] == 1 and demanded_directions(CAT, pe)["pO2"] == -1
    assert demanded_directions(CAT, mi)["Troponin I"] == 1 and "Sodium" not in demanded_directions(CAT, mi)
    assert rules.lab_contradicts(pe, "D-dimer", 0.2) is True and rules.lab_contradicts(pe, "D-dimer", 3.1) is False
    assert rules.lab_contradicts(pe, "pO2", 110) is True and rules.lab_contradicts(pe, "pO2", 62) is False
    assert rules.lab_contradicts(pe, "Sodium", 120) is None
    ctpa = CAT.exams["CT pulmonary angiography"]
    emboli = ("Segmental and subsegmental filling defects in the left lower lobe pulmonary arteries. No right heart "
              "strain.\nIMPRESSION: Acute left lower lobe pulmonary emboli.")
    normal = fill(ctpa.normal, SLOTS).replace("\nIMPRESSION", " Mild dependent atelectasis.\nIMPRESSION")
    assert rules.classify(ctpa, emboli) == ("finding", frozenset({"I26.99"}))
    assert rules.report_contradicts(pe, ctpa, emboli) is False and rules.report_contradicts(mi, ctpa, emboli) is True
    assert rules.classify(ctpa, normal)[0] == "normal"  # an incidental sentence does not hide a normal report
    assert rules.report_contradicts(pe, ctpa, normal) is True  # PE shows on nearly every CTPA
    assert rules.report_contradicts(mi, ctpa, normal) is False
    sputum = CAT.exams["Sputum culture"]
    grows = "Gram stain: many PMNs, Gram-positive cocci in pairs. Culture: moderate growth of Streptococcus pneumoniae."
    assert rules.report_contradicts(pneumonia, sputum, grows) is False and rules.report_contradicts(mi, sputum, grows)
    blood = CAT.exams["Blood culture"]
    assert rules.classify(blood, blood.background[0][1])[0] == "background"
    assert rules.report_contradicts(mi, blood, blood.background[0][1]) is False
    assert rules.report_contradicts(mi, ctpa, "Looks fine to me.") is None


def test_the_card_puts_models_side_by_side_and_is_written_atomically(reports, tmp_path):
    chosen = [reports["recorded"], reports["statistical"], reports["constant"]]
    text = card(chosen)
    header = next(line for line in text.splitlines() if line.startswith("| metric"))
    assert header == "| metric | recorded | statistical | constant | real data |"
    row = next(line for line in text.splitlines() if line.startswith("| Wasserstein, mean"))
    assert row.split(" | ")[1:4] == ["0.000", f"{chosen[1].wasserstein_mean:.3f}", f"{chosen[2].wasserstein_mean:.3f}"]
    assert "| Sodium |" in text
    md, js = write_card(chosen, tmp_path / "card")
    assert md.read_text() == text and load_card(js) == chosen
    assert not [p for p in (tmp_path / "card").iterdir() if p.name.startswith(".")]
    with pytest.raises(ValueError, match="no fidelity reports"):
        card([])


def test_the_fidelity_command_passes_its_options_to_the_flow(monkeypatch, tmp_path):
    import flows.diag
    import flows.runtime
    from flows.cli_diag import app

    calls: list[dict] = []
    (tmp_path / "card.md").write_text("| metric | recorded |\n")
    monkeypatch.setattr(flows.runtime, "prefect_api", contextlib.nullcontext)
    monkeypatch.setattr(flows.diag, "fidelity_flow",
                        lambda **kw: calls.append(kw) or {"card": str(tmp_path / "card.md")})
    runner = CliRunner()
    res = runner.invoke(app, ["fidelity", "--cases", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "o"),
                              "--seed", "3"])
    assert res.exit_code == 0, res.output
    assert calls[-1] == {"cases": tmp_path / "c.jsonl", "out_dir": tmp_path / "o", "train": None, "seed": 3,
                         "min_values": 10, "profile": "demo"}
    assert "| metric | recorded |" in res.output
    res = runner.invoke(app, ["fidelity", "--cases", "a", "--train", "b", "--out", "o", "--min-values", "5"])
    assert res.exit_code == 0 and calls[-1]["train"].name == "b" and calls[-1]["min_values"] == 5
    assert runner.invoke(app, ["fidelity", "--cases", "a"]).exit_code != 0  # --out is required


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_fidelity_stage_writes_and_tracks_the_card(tmp_path):
    from mlflow.tracking import MlflowClient

    from components.diag.cohort import CohortConfig, build_cohort
    from components.diag.record import save_cases
    from flows.diag import fidelity_stage

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = PipelineConfig.model_validate({"profile": "diag-test", "tracking": {
        "mlflow_uri": uri, "artifact_location": str(tmp_path / "artifacts"), "experiment": "diag-test"}})
    save_cases(tmp_path / "cases.jsonl", build_cohort(CohortConfig(patients=120, seed=5, test_fraction=0.3)))
    result = fidelity_stage(cfg, tmp_path / "cases.jsonl", tmp_path / "card", seed=1, min_values=5)
    assert set(result["models"]) == {"recorded", "statistical"}
    assert result["models"]["recorded"]["wasserstein_mean"] == pytest.approx(0.0, abs=1e-9)
    assert json.loads((tmp_path / "card" / "card.json").read_text())["models"][1]["model"] == "statistical"

    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("diag-test").experiment_id])
    assert run.data.tags["medgym.stage"] == "diag.fidelity" and run.data.params["models"] == "recorded,statistical"
    assert run.data.metrics["recorded.variance_ratio_mean"] == pytest.approx(1.0)
    assert run.data.metrics["statistical.wasserstein_mean"] == pytest.approx(result["models"]["statistical"]["wasserstein_mean"])
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"card.md", "card.json"}
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="need train cases"):
        fidelity_stage(cfg, tmp_path / "cases.jsonl", tmp_path / "x", train=tmp_path / "empty.jsonl")
