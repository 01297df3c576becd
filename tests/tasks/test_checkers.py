"""The checkers must not be foolable: each published MedAgentGym checker bug has a test that pins it shut."""

from __future__ import annotations

import random

import pytest

from components.tasks.checkers import check_value
from components.tasks.record import AnswerSpec, AnswerType

NUM5 = AnswerSpec(type=AnswerType.NUMERIC, rel_tol=0.05)


# ---- bug 1: a ±5% tolerance check written so that it is always true -------------------------------------


@pytest.mark.parametrize("got,ok", [(100, True), (104.9, True), (95.1, True), (105.1, False), (94.9, False),
                                    (200, False), (0, False), (-100, False), (1e9, False)])
def test_relative_tolerance_is_measured_against_the_truth(got, ok):
    assert check_value(NUM5, 100, got).correct is ok


def test_tolerance_never_accepts_far_answers_whatever_their_sign():
    rng = random.Random(0)
    for _ in range(2000):
        truth = rng.choice([-1, 1]) * rng.uniform(0.01, 1e4)
        far = truth * rng.choice([-1, 1]) * rng.uniform(1.2, 50) + rng.choice([0, truth * 0.5])
        if abs(far - truth) <= 0.05 * abs(truth):
            continue
        assert not check_value(NUM5, truth, far).correct, (truth, far)


def test_negative_truth_tolerance():
    assert check_value(NUM5, -10, -10.4).correct
    assert not check_value(NUM5, -10, -11).correct
    assert not check_value(NUM5, -10, 10).correct


def test_interval_from_medcalc_limits():
    spec = AnswerSpec(type=AnswerType.NUMERIC, lower=23.9761, upper=26.4999)
    assert check_value(spec, 25.238, 24.0).correct
    assert check_value(spec, 25.238, "26.4 mL/min").correct
    assert not check_value(spec, 25.238, 26.5).correct
    assert not check_value(spec, 25.238, 23.9).correct
    with pytest.raises(ValueError):
        AnswerSpec(type=AnswerType.NUMERIC, lower=2, upper=1)


# ---- bug 2: substring matching that accepts "10" for "1" ------------------------------------------------


@pytest.mark.parametrize("spec_type,truth,got", [
    (AnswerType.STRING, "1", "10"),
    (AnswerType.STRING, "aspirin", "aspirin ec 325 mg"),
    (AnswerType.STRING, "po", "the route is po"),
    (AnswerType.INTEGER, 1, "10"),
    (AnswerType.NUMERIC, 1, "10"),
    (AnswerType.SET, ["1"], "10"),
    (AnswerType.SET, ["po"], ["po", "iv"]),
    (AnswerType.SET, ["po", "iv"], ["po"]),
    (AnswerType.LIST, ["a", "b"], ["b", "a"]),
])
def test_no_substring_or_partial_matches(spec_type, truth, got):
    assert not check_value(AnswerSpec(type=spec_type), truth, got).correct


def test_a_number_spray_is_not_an_answer():
    assert not check_value(NUM5, 1, "1 2 3 4 5 6 7 8 9 10").correct
    assert not check_value(AnswerSpec(type=AnswerType.INTEGER), 4, "between 3 and 5").correct


def test_booleans_are_not_numbers_and_numbers_not_booleans():
    assert not check_value(AnswerSpec(type=AnswerType.INTEGER), 1, True).correct
    assert not check_value(AnswerSpec(type=AnswerType.BOOLEAN), True, "true or false").correct
    assert check_value(AnswerSpec(type=AnswerType.BOOLEAN), True, "Yes").correct
    assert not check_value(AnswerSpec(type=AnswerType.BOOLEAN), True, "no").correct


def test_nan_and_infinity_are_refused():
    for bad in ("nan", float("nan"), "inf", float("-inf")):
        assert not check_value(NUM5, 1.0, bad).correct


def test_integer_answers_are_exact():
    spec = AnswerSpec(type=AnswerType.INTEGER)
    assert check_value(spec, 4, "4").correct
    assert check_value(spec, 4, 4.0).correct
    assert not check_value(spec, 4, 4.4).correct
    assert not check_value(spec, 4, 5).correct


def test_collections_normalise_but_compare_whole_elements():
    spec = AnswerSpec(type=AnswerType.SET)
    assert check_value(spec, ["po", "po/ng"], "['PO/NG', 'po']").correct
    assert check_value(spec, ["92"], 92).correct
    assert check_value(spec, ["10.52"], [10.52]).correct
    assert not check_value(spec, ["10.52"], [10.5]).correct
    assert check_value(AnswerSpec(type=AnswerType.LIST), [14, 1], "[14, 1]").correct


def test_case_sensitivity_is_opt_in():
    assert check_value(AnswerSpec(type=AnswerType.STRING), "ATG", "atg").correct
    assert not check_value(AnswerSpec(type=AnswerType.STRING, case_sensitive=True), "ATG", "atg").correct


# ---- bug 4: a missing answer counted as right ------------------------------------------------------------


@pytest.mark.parametrize("missing", [None, "", "   ", [], {}])
@pytest.mark.parametrize("spec_type,truth", [(AnswerType.NUMERIC, 0), (AnswerType.STRING, ""),
                                             (AnswerType.SET, []), (AnswerType.BOOLEAN, False)])
def test_missing_answer_is_never_right(missing, spec_type, truth):
    # even where the truth itself is "empty-looking", no submission is not a correct submission
    result = check_value(AnswerSpec(type=spec_type), truth, missing)
    assert not result.correct
    assert "no answer" in result.reason
