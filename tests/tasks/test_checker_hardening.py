"""Issue 8, sections 2, 3, 5 and 7: no text around a number, no value outside its domain and no SQL result
read out of shape earns a reward, and every true answer in an ordinary form does."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from components.tasks.checkers import check_answer, check_value
from components.tasks.generators import GenContext, all_generators
from components.tasks.record import AnswerSpec, AnswerType, Domain, Task, ValueKind

NUM5 = AnswerSpec(type=AnswerType.NUMERIC, rel_tol=0.05)


def calc_task(category: str, answer: object, spec: AnswerSpec | None = None) -> Task:
    """A calculator task with the generated prompt's question (its unit phrasing is what the checker reads)."""
    from components.tasks.calculators.registry import BY_CATEGORY

    calc = BY_CATEGORY[category]
    return Task(task_id=f"{category}/t/0", dataset="synthetic_medcalc", category=category, domain=Domain.CALCULATOR,
                split="t", prompt=f"Patient note:\nA 40 year old weighing 70 kg.\n\nQuestion: {calc.question}",
                answer=answer, answer_spec=spec or NUM5)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Task]]:
    out = tmp_path_factory.mktemp("gen")
    gens = {g.category: g for g in all_generators()}
    wanted = ("biostat_correlation_csv", "biostat_ttest_csv", "biostat_logrank", "bioinfo_gc_content",
              "biostat_km_survival_at", "calc_bmi", "calc_ckd_epi_2021", "calc_mdrd_gfr", "calc_fena",
              "calc_delta_gap", "calc_gestational_age", "calc_due_date", "bioinfo_motif")
    return {c: list(gens[c].generate(GenContext(out_dir=out, seed=0, split="train"), 60)) for c in wanted}


# ---- 2. text around a number -----------------------------------------------------------------------------


@pytest.mark.parametrize("got", ["not 39.576", "less than 40", "≥38", "<40", "> 39", "~39.6", "≈39.6", "about 39.6",
                                 "38-40", "38–40", "38 to 40", "39.576 or less", "BMI is 39.576", "39.576 ± 0.1",
                                 "39.576 roughly", "39.576 kg/m2 or so", "39.576, 40.1"])
def test_negations_inequalities_ranges_and_words_are_refused(got):
    result = check_answer(calc_task("calc_bmi", 39.576), got)
    assert not result.correct and "unparsable" in result.reason, result.reason


@pytest.mark.parametrize("got,why", [("not 39.576", "negation"), ("less than 40", "inequality"), ("≥38", "inequality"),
                                     ("38–40", "range"), ("39.576 apples", "unexpected text")])
def test_the_refusal_says_why(got, why):
    assert why in check_value(NUM5, 39.576, got).reason


def test_a_percent_sign_where_a_fraction_is_asked_is_refused(generated):
    gc = generated["bioinfo_gc_content"][0]
    assert check_answer(gc, gc.answer).correct
    assert check_answer(gc, f"{gc.answer}").correct
    result = check_answer(gc, f"{gc.answer}%")
    assert not result.correct and "percent" in result.reason
    assert not check_value(AnswerSpec(type=AnswerType.NUMERIC, abs_tol=1e-4), 0.6, "0.6%").correct


def test_a_percent_sign_where_a_percentage_is_asked_is_accepted():
    fena = calc_task("calc_fena", 0.204)
    assert check_answer(fena, "0.204%").correct
    assert check_answer(fena, "0.204").correct
    assert check_answer(fena, "0.204 percent").correct


@pytest.mark.parametrize("minus", ["\u2212", "\u2012", "\u2013", "\u2014", "\u2010", "\u2011", "\ufe63", "\uff0d"])
def test_unicode_minus_and_dashes_read_as_minus(minus):
    assert not check_answer(calc_task("calc_delta_gap", 2.0), f"{minus}2.0").correct
    assert check_answer(calc_task("calc_delta_gap", -8.0), f"{minus}8.0").correct
    assert check_answer(calc_task("calc_delta_gap", -8.0), f"{minus}8.0 mEq/L").correct


def test_no_positive_delta_gap_accepts_its_negation(generated):
    positive = [t for t in generated["calc_delta_gap"] if t.answer > 0]
    assert positive
    for task in positive:
        assert check_answer(task, task.answer).correct
        assert not check_answer(task, f"\u2212{task.answer}").correct, task.answer


@pytest.mark.parametrize("category,got", [("calc_ckd_epi_2021", "22.295 mL/min/1.73 m²"),
                                          ("calc_ckd_epi_2021", "22.295 mL/min/1.73m2"),
                                          ("calc_mdrd_gfr", "22.295 ml/min/1.73 m^2"),
                                          ("calc_bmi", "22.295 kg/m2"), ("calc_bmi", "22.295 kg/m²"),
                                          ("calc_bmi", "22.295")])
def test_units_with_digits_are_accepted(category, got):
    assert check_answer(calc_task(category, 22.295), got).correct


def test_a_unit_other_than_the_one_asked_is_refused():
    result = check_answer(calc_task("calc_bmi", 39.576), "39.576 kg")
    assert not result.correct and "not the unit asked" in result.reason
    assert not check_answer(calc_task("calc_ckd_epi_2021", 22.295), "22.295 mL/min").correct
    spec = AnswerSpec(type=AnswerType.NUMERIC, rel_tol=0.05, unit="kg/m²")
    assert check_value(spec, 39.576, "39.576 kg/m^2").correct
    assert not check_value(spec, 39.576, "39.576 mmHg").correct


@pytest.mark.parametrize("got", ["$9,012.74", "9,012.74", "$ 9,012.74", "9012.74 USD", "9,012.74 dollars"])
def test_money_with_thousands_separators(got):
    assert check_value(AnswerSpec(type=AnswerType.NUMERIC, abs_tol=0.01), 9012.74, got).correct


def test_scientific_notation_forms():
    spec = AnswerSpec(type=AnswerType.NUMERIC, rel_tol=1e-3)
    for got in ("7.5e-30", "7.5E-30", "7.5 × 10^-30", "7.5x10^-30", "7.5×10⁻³⁰", "7.5 * 10**-30"):
        assert check_value(spec, 7.5e-30, got).correct, got


# ---- 3. answers outside their domain ---------------------------------------------------------------------


P_VALUE = AnswerSpec(type=AnswerType.NUMERIC, rel_tol=1e-3, abs_tol=1e-5, kind=ValueKind.P_VALUE)


@pytest.mark.parametrize("got", ["0", 0, "-0.000009", "0.000009", "1e-6", -7.5e-30, "1.5"])
def test_a_tiny_p_value_is_compared_in_relative_terms(got):
    assert not check_value(P_VALUE, 7.5e-30, got).correct


def test_a_p_value_accepts_itself_to_its_relative_tolerance():
    assert check_value(P_VALUE, 7.5e-30, "7.5e-30").correct
    assert check_value(P_VALUE, 7.5e-30, 7.504e-30).correct
    assert not check_value(P_VALUE, 7.5e-30, 7.6e-30).correct
    assert check_value(P_VALUE, 0.38287044935146136, "0.382870").correct


def test_generated_p_value_tasks_refuse_zero_and_negatives(generated):
    tasks = [t for c in ("biostat_correlation_csv", "biostat_ttest_csv", "biostat_logrank")
             for t in generated[c] if "p-value" in t.prompt]
    assert len(tasks) > 20
    assert any(t.answer < 1e-5 for t in tasks)  # the tiny ones an absolute window gave away
    for task in tasks:
        assert check_answer(task, task.answer).correct, task.task_id
        for bad in ("0", "-0.000009", -task.answer, task.answer * 1.01 + 1e-12):
            assert not check_answer(task, bad).correct, (task.task_id, task.answer, bad)


def test_a_probability_lies_in_the_unit_interval():
    spec = AnswerSpec(type=AnswerType.NUMERIC, abs_tol=0.01, kind=ValueKind.PROBABILITY)
    assert check_value(spec, 1.0, 0.995).correct
    result = check_value(spec, 1.0, 1.005)
    assert not result.correct and "[0, 1]" in result.reason
    assert not check_value(spec, 0.0, -0.004).correct
    assert not check_value(spec, 0.6, "60%").correct
    assert not check_value(spec, 0.6, "0.6%").correct


def test_generated_probabilities_refuse_out_of_range_values(generated):
    for task in generated["biostat_km_survival_at"] + generated["bioinfo_gc_content"]:
        assert check_answer(task, task.answer).correct
        assert not check_answer(task, -1e-5).correct
        assert not check_answer(task, 1.00001).correct


def test_a_count_is_a_non_negative_integer():
    spec = AnswerSpec(type=AnswerType.NUMERIC, abs_tol=1.0, kind=ValueKind.COUNT)
    assert check_value(spec, 0, 0).correct
    assert not check_value(spec, 0, -0.5).correct
    assert not check_value(spec, 0, 0.5).correct
    result = check_value(AnswerSpec(type=AnswerType.INTEGER, kind=ValueKind.COUNT), 3, -3)
    assert not result.correct and "count" in result.reason


# ---- 5. SQL results keep their shape ----------------------------------------------------------------------


ROWS = AnswerSpec(type=AnswerType.ROWS, case_sensitive=True)
ORDERED = AnswerSpec(type=AnswerType.ORDERED_ROWS, case_sensitive=True)


def test_a_flattened_row_in_the_wrong_order_is_refused():
    assert not check_value(ROWS, [["urgent", 1]], ["1", "urgent"]).correct
    assert not check_value(ROWS, [["urgent", "1"]], ["1", "urgent"]).correct


@pytest.mark.parametrize("got", [[["urgent", 1]], '[["urgent", 1]]', ["urgent", 1], ["urgent", "1"], [["urgent", 1.0]],
                                 [[" urgent ", "1"]], (("urgent", 1),)])
def test_a_row_given_as_rows_or_in_the_release_form_is_accepted(got):
    assert check_value(ROWS, [["urgent", 1]], got).correct


def test_multi_column_results_compare_as_a_multiset_of_rows():
    truth = [["ELECTIVE", 9], ["EMERGENCY", 3]]
    assert check_value(ROWS, truth, [["EMERGENCY", 3], ["ELECTIVE", 9]]).correct
    assert check_value(ROWS, truth, ["ELECTIVE", "9", "EMERGENCY", "3"]).correct
    assert not check_value(ROWS, truth, [["ELECTIVE", 3], ["EMERGENCY", 9]]).correct  # same cells, other rows
    assert not check_value(ROWS, truth, ["ELECTIVE", "EMERGENCY", "9", "3"]).correct  # column after column
    assert not check_value(ROWS, truth, [["ELECTIVE", 9]]).correct
    assert not check_value(ROWS, truth, [["ELECTIVE", 9], ["EMERGENCY", 3], ["ELECTIVE", 9]]).correct
    result = check_value(ROWS, truth, [["ELECTIVE", 9, 1], ["EMERGENCY", 3, 1]])
    assert not result.correct and "column" in result.reason


def test_one_column_results_take_a_flat_list_and_count_duplicates():
    truth = [["po"], ["po/ng"]]
    assert check_value(ROWS, truth, ["po/ng", "po"]).correct
    assert check_value(ROWS, truth, [["po"], ["po/ng"]]).correct
    assert not check_value(ROWS, truth, ["po"]).correct
    assert not check_value(ROWS, [["po"], ["po"]], ["po"]).correct
    assert check_value(ROWS, [[92]], "92").correct and check_value(ROWS, [[92]], 92).correct


def test_ordered_results_compare_as_a_list():
    truth = [["2102-12-02 20:28:00"], ["2102-12-03 08:00:00"]]
    assert check_value(ORDERED, truth, ["2102-12-02 20:28:00", "2102-12-03 08:00:00"]).correct
    result = check_value(ORDERED, truth, ["2102-12-03 08:00:00", "2102-12-02 20:28:00"])
    assert not result.correct and "wrong order" in result.reason


def test_cells_are_typed():
    assert check_value(ROWS, [[10.0]], ["10"]).correct  # a number by value
    assert check_value(ROWS, [[10.52]], [10.52]).correct
    assert not check_value(ROWS, [[10.52]], [10.5]).correct
    assert not check_value(ROWS, [["0389"]], [389]).correct  # an ICD-9 code is text: its zero is part of it
    assert check_value(ROWS, [["0389"]], ["0389"]).correct
    assert not check_value(ROWS, [["Circumcision"]], ["circumcision"]).correct  # text exactly, after trimming
    assert check_value(ROWS, [[None, 3]], ["None", 3]).correct
    assert not check_value(ROWS, [[1]], [True]).correct


# ---- 7. true answers refused -----------------------------------------------------------------------------


GESTATION_FORMS = ["(19 weeks, 6 days)", [19, 6], "('19 weeks', '6 days')", ("19 weeks", "6 days"),
                   "19 weeks, 6 days", {"weeks": 19, "days": 6}, '{"weeks": 19, "days": 6}', "[19, 6]",
                   "19 weeks and 6 days", ["19 weeks", "6 days"]]


@pytest.mark.parametrize("got", GESTATION_FORMS)
def test_gestational_age_in_every_form(got, generated):
    stored = calc_task("calc_gestational_age", "(19 weeks, 6 days)", AnswerSpec(type=AnswerType.STRING))
    assert check_answer(stored, got).correct


@pytest.mark.parametrize("got", ["(19 weeks, 5 days)", [6, 19], ["6 days", "19 weeks"], "(18 weeks, 13 days)",
                                 "19 weeks", "139 days", {"weeks": 19}, "(19 weeks, 6 days) or so"])
def test_gestational_age_refuses_other_values(got):
    assert not check_value(AnswerSpec(type=AnswerType.STRING), "(19 weeks, 6 days)", got).correct


def test_generated_gestational_ages_accept_the_release_forms(generated):
    for task in generated["calc_gestational_age"][:10]:
        weeks, days = (int(s.split()[0]) for s in task.answer.strip("()").split(", "))
        for form in (f"('{weeks} weeks', '{days} days')", [weeks, days], {"weeks": weeks, "days": days}):
            assert check_answer(task, form).correct, (task.answer, form)
        assert not check_answer(task, [weeks, (days + 1) % 7]).correct


@pytest.mark.parametrize("got", ["07/26/2014", "7/26/2014", "2014-07-26", "2014-07-26T00:00:00",
                                 "2014-07-26T13:45:10Z", "2014-07-26T13:45:10.5+02:00", "2014-07-26 08:00", ["7/26/2014"]])
def test_dates_in_every_ordinary_form(got):
    assert check_value(AnswerSpec(type=AnswerType.STRING), "07/26/2014", got).correct


@pytest.mark.parametrize("got", ["07/27/2014", "26/07/2014", "2014-26-07", "July 2014", "2014-07-26T", "7/26/14"])
def test_dates_refuse_other_days_and_forms(got):
    assert not check_value(AnswerSpec(type=AnswerType.STRING), "07/26/2014", got).correct


def test_generated_dates_accept_m_d_y_without_zeros(generated):
    for task in generated["calc_due_date"][:10]:
        month, day, year = (int(p) for p in task.answer.split("/"))
        assert check_answer(task, f"{month}/{day}/{year}").correct
        assert check_answer(task, f"{year}-{month:02d}-{day:02d}T00:00:00").correct


def test_a_motif_list_without_brackets(generated):
    spec = AnswerSpec(type=AnswerType.LIST)
    assert check_value(spec, [13, 14, 39], "13, 14, 39").correct
    assert check_value(spec, [13, 14, 39], "13,14,39").correct
    assert not check_value(spec, [13, 14, 39], "13, 39, 14").correct
    assert not check_value(spec, [1, 234], "1,234").correct  # one number or two: not guessed
    for task in generated["bioinfo_motif"][:10]:
        assert check_answer(task, ", ".join(str(p) for p in task.answer)).correct


@pytest.mark.parametrize("got,ok", [(1.0, True), ("1.0", True), (0.0, False), ("0.0", False), (2.0, None), (0.5, None)])
def test_a_boolean_as_one_point_zero(got, ok):
    spec = AnswerSpec(type=AnswerType.BOOLEAN)
    if ok is None:
        assert not check_value(spec, True, got).correct and not check_value(spec, False, got).correct
    else:
        assert check_value(spec, True, got).correct is ok
        assert check_value(spec, False, got).correct is not ok


# ---- old task files ---------------------------------------------------------------------------------------


def test_task_files_written_before_these_fields_still_load_and_check(tmp_path: Path):
    from components.tasks.record import load_tasks

    line = ('{"task_id": "treqs/train/0", "dataset": "treqs", "category": "treqs_count", "domain": "ehr", '
            '"split": "train", "prompt": "How many?", "answer": ["92"], '
            '"answer_spec": {"type": "set", "case_sensitive": false}, "source": "medagentgym"}\n')
    (tmp_path / "tasks.jsonl").write_text(line)
    task = load_tasks(tmp_path / "tasks.jsonl")[0]
    assert task.answer_spec.unit is None and task.answer_spec.kind is None
    assert check_answer(task, "92").correct and not check_answer(task, "93").correct


def test_random_numeric_answers_round_trip_through_text():
    """Every finite float written as Python, JSON or with a Unicode minus reads back as itself."""
    rng = random.Random(8)
    spec = AnswerSpec(type=AnswerType.NUMERIC, rel_tol=1e-9)
    for _ in range(500):
        x = rng.choice([-1, 1]) * 10 ** rng.uniform(-30, 6)
        for text in (repr(x), f"{x:.12g}", f"{x:.12g}".replace("-", "\u2212")):
            assert check_value(spec, x, text).correct, text
