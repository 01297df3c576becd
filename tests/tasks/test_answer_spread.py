"""A constant answer must not score without solving: no generated category's answers pile up on a value (or, with
its tolerance, near one) that a policy could learn instead of the task. Figures: `python -m bench.constant_answers`.
"""

from __future__ import annotations

import collections
import json
import random
from pathlib import Path

import pytest

from components.tasks.checkers import check_answer
from components.tasks.generators import all_generators
from components.tasks.generators.balance import balanced
from components.tasks.generators.calculators import REL_SLACK, answer_spec
from components.tasks.record import AnswerSpec, AnswerType, Domain, Task, save_tasks
from components.tasks.spread import category_spread, entropy_bits, spread_bound
from components.tasks.suite import SuiteSize, generate_category
from components.tasks.validation import MIN_TASKS_FOR_BOUND, validate_tasks

PER_CATEGORY = 300
# the worst categories before the fix (best constant accepted on 30-90% of tasks), checked in the default loop
WORST = ("ehr_abnormal_lab_count", "ehr_admissions_in_year", "ehr_drug_route", "ehr_distinct_drugs_admission",
         "ehr_patient_gender", "calc_sodium_correction", "calc_qtc_hodges", "calc_serum_osmolality", "calc_sirs",
         "calc_curb65", "bioinfo_codon_usage")


def task(i: int, answer, spec: AnswerSpec, category: str = "c", source: str = "generated") -> Task:
    return Task(task_id=f"{category}/train/{i}", dataset="synthetic_mimic_iii", category=category, domain=Domain.EHR,
                split="train", prompt=f"Question number {i} about nothing in particular?", answer=answer,
                answer_spec=spec, source=source)


# ---- the measure --------------------------------------------------------------------------------------------


def test_bound_is_a_uniform_draw_over_at_most_ten_answers_plus_ten_points():
    assert spread_bound(2) == pytest.approx(0.6)
    assert spread_bound(4) == pytest.approx(0.35)
    assert spread_bound(10) == spread_bound(300) == pytest.approx(0.2)
    assert entropy_bits(["a", "b", "c", "d"]) == pytest.approx(2.0)
    assert entropy_bits(["a"] * 5) == 0.0


def test_a_tolerance_window_wins_between_truths():
    # no truth is within 5% of both ends, but 104 is within 5% of every one of them
    spec = AnswerSpec(type=AnswerType.NUMERIC, rel_tol=0.05)
    tasks = [task(i, v, spec) for i, v in enumerate((100.0, 104.0, 108.0, 200.0, 300.0))]
    s = category_spread("c", tasks)
    assert s.best_share == pytest.approx(0.6) and s.distinct == 5
    assert sum(check_answer(t, s.best_constant).correct for t in tasks) == 3


def test_intervals_that_meet_at_a_truth_are_found():
    # lab values on a 0.01 grid with an absolute tolerance of 0.01: 5.55 is accepted by 5.54, 5.55 and 5.56
    spec = AnswerSpec(type=AnswerType.NUMERIC, abs_tol=0.01)
    values = [5.54, 5.55, 5.56, 1.0, 2.0, 3.0, 4.0, 6.5, 7.5, 8.5]
    s = category_spread("c", [task(i, v, spec) for i, v in enumerate(values)])
    assert s.best_share == pytest.approx(0.3)


def test_the_checker_decides_what_counts_as_the_same_answer():
    # a set answer in another order is the same answer to the set checker, though it is written differently
    spec = AnswerSpec(type=AnswerType.SET)
    answers = [["po"], ["iv", "po"], ["po", "iv"], ["sc"]]
    s = category_spread("c", [task(i, a, spec) for i, a in enumerate(answers)])
    assert s.distinct == 4 and s.best_share == pytest.approx(0.5)


def test_code_tasks_refuse_every_constant_and_do_not_stop_the_count():
    code = AnswerSpec(type=AnswerType.CODE, tests="assert f() == 1")
    tasks = [task(0, "def f(): return 1", code), task(1, 7, AnswerSpec(type=AnswerType.INTEGER))]
    s = category_spread("c", tasks)
    assert s.best_constant == 7 and s.best_share == pytest.approx(0.5)
    assert category_spread("c", tasks[:1]).best_share == 0.0


def test_balanced_takes_one_per_answer_per_round():
    items = [("a", i) for i in range(90)] + [("b", i) for i in range(8)] + [("c", i) for i in range(2)]
    picked = balanced(items, 12, random.Random(0), key=lambda x: x[0])
    counts = collections.Counter(k for k, _ in picked)
    assert counts == {"a": 5, "b": 5, "c": 2}
    assert balanced(items, 12, random.Random(0), key=lambda x: x[0]) == picked
    assert len(balanced(items, 500, random.Random(0), key=lambda x: x[0])) == len(items)


# ---- the generated suite ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("spread")


def _generated(category: str, out: Path, seed: int = 0) -> list[Task]:
    gen = next(g for g in all_generators() if g.category == category)
    tasks, _ = generate_category(gen, out, SuiteSize(train_per_category=PER_CATEGORY, test_per_category=0), seed)
    return tasks


def _assert_within_bound(category: str, tasks: list[Task]) -> None:
    s = category_spread(category, tasks)
    assert len(tasks) == PER_CATEGORY, category
    assert s.within_bound, (f"{category}: {s.best_constant!r} accepted on {s.best_share:.1%} of {s.tasks} tasks "
                            f"({s.distinct} distinct answers); bound {s.bound:.1%}")


@pytest.mark.parametrize("category", WORST)
def test_the_worst_categories_before_are_within_the_bound(category, out_dir):
    _assert_within_bound(category, _generated(category, out_dir))


def test_binary_answers_are_balanced(out_dir):
    counts = collections.Counter(t.answer for t in _generated("ehr_patient_gender", out_dir))
    assert set(counts) == {"m", "f"} and abs(counts["m"] - counts["f"]) <= 2


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_every_generated_category_is_within_the_bound(seed, tmp_path):
    over = []
    for gen in sorted(all_generators(), key=lambda g: g.category):
        tasks = _generated(gen.category, tmp_path, seed=seed)
        s = category_spread(gen.category, tasks)
        if not s.within_bound or len(tasks) < PER_CATEGORY:
            over.append(f"{s.category}: {len(tasks)} tasks, {s.best_share:.1%} > {s.bound:.1%} ({s.best_constant!r})")
    assert not over, over


# ---- generated calculators: a tolerance that matches the precision asked ------------------------------------


def test_calculator_window_is_half_a_unit_of_the_asked_decimal_plus_a_small_relative_slack(out_dir):
    tasks = _generated("calc_qtc_bazett", out_dir)[:50]
    for t in tasks:
        assert "Round your answer to the nearest whole number." in t.prompt
        assert t.answer == round(t.answer)
        spec = t.answer_spec
        exact = (spec.lower + spec.upper) / 2
        assert spec.upper - spec.lower == pytest.approx(2 * (0.5 + REL_SLACK * abs(exact)))
        assert check_answer(t, round(exact)).correct and check_answer(t, exact).correct
        assert not check_answer(t, exact * 1.02).correct  # within MedCalc-Bench's ±5%, but not what was asked
    bmi = _generated("calc_bmi", out_dir)[0]
    assert "Round your answer to 1 decimal place." in bmi.prompt and round(bmi.answer, 1) == bmi.answer


def test_a_correctly_rounded_answer_passes_whichever_way_it_rounds():
    spec = answer_spec("numeric", 412.5, decimals=0)  # 412 and 413 are both the exact value rounded
    for got in (412, 413, 412.5):
        assert spec.lower <= got <= spec.upper
    assert not spec.lower <= 415 <= spec.upper
    negative = answer_spec("numeric", -0.828, decimals=2)
    assert negative.lower < -0.83 < negative.upper and not negative.lower <= -0.85


# ---- `medgym tasks validate` reports the spread and holds generated categories to it -------------------------


def test_validate_reports_spread_and_fails_a_generated_category_over_the_bound(tmp_path):
    spec = AnswerSpec(type=AnswerType.INTEGER)
    n = MIN_TASKS_FOR_BOUND
    piled = [task(i, 1 if i % 10 else i, spec, category="piled") for i in range(n)]  # 90% are 1
    spread = [task(i, i % 10, spec, category="spread") for i in range(n)]
    imported = [task(i, 3, spec, category="imported", source="medagentgym") for i in range(n)]
    path = tmp_path / "tasks.jsonl"
    save_tasks(path, piled + spread + imported)
    report = validate_tasks(path)
    by = {s.category: s for s in report.answer_spread}
    assert by["piled"].best_share == pytest.approx(0.9) and not by["piled"].within_bound
    assert by["spread"].best_share == pytest.approx(0.1) and by["spread"].entropy_bits == pytest.approx(3.32, abs=0.01)
    assert by["imported"].best_share == 1.0  # reported, but a release's answers are what they are
    assert not report.success
    (failure,) = [f for f in report.failures if f.column == "answer"]
    assert failure.unexpected_count == 1 and failure.unexpected[0].startswith("piled:")
    assert json.loads(report.model_dump_json())["answer_spread"][0]["within_bound"] in (True, False)
    save_tasks(path, spread + imported)
    assert validate_tasks(path).success
