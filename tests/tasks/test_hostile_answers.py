"""Issue 23, section 5: every checker returns a verdict for any JSON value a hostile agent submits, compares codes
as text, reads a timestamp in any ISO form, and bounds the work one submission can cause."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import pytest

from components.sandbox.factory import open_sandbox
from components.tasks.answer_forms import (
    MAX_ANSWER_CHARS,
    MAX_ANSWER_DEPTH,
    MAX_ANSWER_VALUES,
    Unparsable,
    parse_number,
    parse_weeks_days,
)
from components.tasks.checkers import CheckResult, cell_key, check_answer, check_code, check_value
from components.tasks.generators import GenContext, all_generators
from components.tasks.record import AnswerSpec, AnswerType, Task, ValueKind
from tests.envs.conftest import process_backend_unavailable

HUGE = int("9" * 400)  # a JSON integer past float range (about 1e400)


def spec(type_: AnswerType, **kw: Any) -> AnswerSpec:
    return AnswerSpec(type=type_, **kw)


# ---- 1. a number too large for a float -------------------------------------------------------------------------

NUMBER_TRUTHS = [
    (spec(AnswerType.INTEGER), 3),
    (spec(AnswerType.NUMERIC, rel_tol=0.05), 3.5),
    (spec(AnswerType.NUMERIC, lower=1.0, upper=5.0), 3.0),
    (spec(AnswerType.SET), [1, 2]),
    (spec(AnswerType.LIST), [1, 2]),
    (spec(AnswerType.ROWS), [[1, "a"]]),
    (spec(AnswerType.ORDERED_ROWS), [[1], [2]]),
]


@pytest.mark.parametrize("answer_spec,truth", NUMBER_TRUTHS, ids=lambda v: getattr(v, "type", None) or "")
@pytest.mark.parametrize("got", [HUGE, -HUGE, [HUGE], [HUGE, 2], [[HUGE, "a"]], [1, -HUGE]],
                         ids=["int", "-int", "[int]", "[int, 2]", "[[int, a]]", "[1, -int]"])
def test_an_integer_past_float_range_is_a_wrong_answer_not_a_crash(answer_spec, truth, got):
    result = check_value(answer_spec, truth, got)
    assert result.correct is False and result.reason, result


def test_the_readers_refuse_a_huge_integer_with_a_reason():
    for value in (HUGE, -HUGE):
        with pytest.raises(Unparsable, match="digits is out of range"):
            parse_number(value)
        with pytest.raises(Unparsable, match="out of range"):
            cell_key(value, case_sensitive=False)
    # the huge integer is one element among the others: it matches nothing, the rest still compare
    assert check_value(spec(AnswerType.SET), [1, 2], [1, HUGE]).reason.startswith("missing ['2.0'], unexpected ['999")


@pytest.mark.parametrize("got", [[math.inf, 3], [math.nan, 3], ["9" * 5000, 3], "9" * 5000 + " weeks, 3 days",
                                 {"weeks": math.inf, "days": 3}])
def test_a_gestational_age_of_infinite_or_endless_weeks_is_refused(got):
    with pytest.raises(Unparsable):
        parse_weeks_days(got)
    assert not check_value(spec(AnswerType.STRING), "(19 weeks, 6 days)", got).correct


# ---- 2. codes compared as numbers ----------------------------------------------------------------------------


@pytest.mark.parametrize("answer_type", [AnswerType.SET, AnswerType.LIST])
def test_codes_compare_as_text(answer_type):
    icd9 = ["0389", "4019"]
    for wrong in (["389", "4019.000"], ["389", "4019"], [389, 4019], ["0389", "4019.0"], ["0389", "+4019"], "389, 4019"):
        result = check_value(spec(answer_type), icd9, wrong)
        assert not result.correct, (wrong, result.reason)
    for right in (["0389", "4019"], [" 0389", "4019 "], '["0389", "4019"]', ["0389", 4019]):
        assert check_value(spec(answer_type), icd9, right).correct, right


def test_numbers_still_compare_by_value_where_the_truth_holds_numbers():
    for answer_type in (AnswerType.SET, AnswerType.LIST):
        assert check_value(spec(answer_type), [3, 17, 40], ["3", 17.0, "40.000"]).correct
        assert check_value(spec(answer_type), [3, 17, 40], "3, 17, 40").correct
        assert not check_value(spec(answer_type), [3, 17, 40], [3, 17, 41]).correct


@pytest.fixture(scope="module")
def collection_tasks(tmp_path_factory: pytest.TempPathFactory) -> list[Task]:
    """Every generated set and list task of a small suite (EHR codes, titles and times; motif positions)."""
    ctx = GenContext(out_dir=tmp_path_factory.mktemp("gen"), seed=0, split="train")
    tasks = [t for g in all_generators() for t in g.generate(ctx, 9)
             if t.answer_spec.type in (AnswerType.SET, AnswerType.LIST)]
    assert {t.category for t in tasks} >= {"ehr_drug_route", "ehr_topk_diagnoses_year", "ehr_first_labs_of_admission",
                                           "bioinfo_motif"}
    return tasks


def test_generated_set_and_list_tasks_accept_their_own_answers(collection_tasks):
    for task in collection_tasks:
        stored = json.loads(json.dumps(task.answer))  # as the reference program prints it and a file holds it
        assert check_answer(task, stored).correct, task.task_id
        if task.answer_spec.type == AnswerType.SET and len(stored) > 1:
            assert check_answer(task, stored[::-1]).correct, task.task_id


# ---- 3. a timestamp in its ISO form ---------------------------------------------------------------------------


def test_first_labs_of_admission_accept_iso_timestamps_with_a_t(collection_tasks):
    labs = [t for t in collection_tasks if t.category == "ehr_first_labs_of_admission"]
    assert labs and all(" " in v for t in labs for v in t.answer)
    for task in labs:
        assert check_answer(task, [v.replace(" ", "T") for v in task.answer]).correct, task.task_id
        assert check_answer(task, [v.replace(" ", "T") + ".000" for v in task.answer]).correct, task.task_id
        # seconds left out where the truth has them, a zone the truth does not state, another minute: wrong
        assert not check_answer(task, [v.replace(" ", "T")[:-3] for v in task.answer]).correct, task.task_id
        assert not check_answer(task, [v.replace(" ", "T") + "Z" for v in task.answer]).correct, task.task_id


@pytest.mark.parametrize("truth,right,wrong", [
    ("2100-02-25 15:47:00", ["2100-02-25T15:47:00", " 2100-02-25 15:47:00", "2100-02-25T15:47:00.000"],
     ["2100-02-25T15:47", "2100-02-25T15:47:01", "2100-02-25T15:47:00Z", "2100-02-25T15:47:00+00:00",
      "2100-02-25", "2100-02-25t15:47:00", "2100-02-25T15:47:00.5", "2100-02-25T 15:47:00"]),
    ("2100-02-25 15:47", ["2100-02-25T15:47"], ["2100-02-25T15:47:00", "2100-02-25T15:47.000"]),
])
def test_a_timestamp_string_equals_its_iso_form_only(truth, right, wrong):
    for answer_type, wrap in ((AnswerType.STRING, lambda v: v), (AnswerType.SET, lambda v: [v]),
                              (AnswerType.LIST, lambda v: [v])):
        for got in right:
            assert check_value(spec(answer_type), wrap(truth), wrap(got)).correct, (answer_type, got)
        for got in wrong:
            assert not check_value(spec(answer_type), wrap(truth), wrap(got)).correct, (answer_type, got)


# ---- 4. host-side parsing cost --------------------------------------------------------------------------------


def _judged_in(answer_spec: AnswerSpec, truth: Any, got: Any) -> tuple[CheckResult, float]:
    start = time.perf_counter()
    result = check_value(answer_spec, truth, got)
    return result, time.perf_counter() - start


def test_a_long_gestational_age_part_is_read_in_linear_time():
    # under the size cap, so only the pattern decides: before the fix this took about 7 s (0.5 s at 16k)
    part = "1" + " " * 60_000 + "x"
    result, seconds = _judged_in(spec(AnswerType.STRING), "(19 weeks, 6 days)", [part, 3])
    assert not result.correct and "whole number of weeks" in result.reason
    assert seconds < 2.0, seconds


SIZED = ((spec(AnswerType.STRING), "(19 weeks, 6 days)"), (spec(AnswerType.SET), ["a", "b"]),
         (spec(AnswerType.NUMERIC, rel_tol=0.05), 1.0))


@pytest.mark.parametrize("got,cap,checkers", [
    (["1" + " " * 100_000 + "x", 3], f"more than {MAX_ANSWER_CHARS} characters", SIZED),
    ("1" + " " * 100_000 + "x", f"more than {MAX_ANSWER_CHARS} characters", SIZED),
    (["a"] * (MAX_ANSWER_VALUES + 1), f"more than {MAX_ANSWER_VALUES} values", SIZED),
    (list(range(10**6)), f"more than {MAX_ANSWER_VALUES} values", SIZED),
    (json.loads("[" * 100 + "]" * 100), f"nested more than {MAX_ANSWER_DEPTH} deep", SIZED),
    (int("9" * 1_200), "at most 1000 are read", SIZED),
    # a short text that reads as a deep literal, where a list or a gestational age may be written as one
    ("[" * 500 + "]" * 500, f"nested more than {MAX_ANSWER_DEPTH} deep", SIZED[:2]),
], ids=["part", "text", "values", "million", "deep", "digits", "deep-text"])
def test_an_answer_over_the_size_cap_is_refused_with_the_cap(got, cap, checkers):
    for answer_spec, truth in checkers:
        result, seconds = _judged_in(answer_spec, truth, got)
        assert not result.correct and result.reason.startswith("unparsable answer") and cap in result.reason, result
        assert seconds < 2.0, seconds


def test_answers_within_the_caps_are_still_read():
    rows = [[i, f"drug {i}"] for i in range(MAX_ANSWER_VALUES // 3)]  # rows of two cells: 1 + 3 values a row
    assert check_value(spec(AnswerType.ROWS), rows, rows[::-1]).correct
    assert check_value(spec(AnswerType.STRING), "x" * (MAX_ANSWER_CHARS - 1), "x" * (MAX_ANSWER_CHARS - 1)).correct


# ---- every checker, a battery of hostile JSON values -----------------------------------------------------------

HOSTILE: list[Any] = [
    HUGE, -HUGE, 10**5000, [HUGE], [-HUGE, HUGE], {"weeks": HUGE, "days": 3}, [[HUGE, -HUGE]],
    "1e400", "-1e400", "1" + "0" * 400, "9" * 5000, ["1e400", "-1e400"],
    "NaN", "Infinity", "-Infinity", math.nan, math.inf, -math.inf, [math.nan], [math.inf, 3], {"weeks": math.nan, "days": 1},
    json.loads("[" * 200 + "1" + "]" * 200), json.loads("[" * 15 + "1" + "]" * 15), "[" * 900 + "]" * 900,
    '{"a": ' * 300 + "1" + "}" * 300, "(" * 10_000,
    "a" * 100_000, "1" + " " * 100_000 + "x", "1 " * 30_000, "1," * 30_000 + "1", "[" + "1," * 30_000 + "1]",
    "(19 weeks, " * 5_000, "2100-02-25T" * 6_000, "-" * 60_000 + "1", "1e" + "9" * 60_000, "$" + " " * 60_000 + "1",
    {}, {"a": 1}, {"weeks": "x", "days": []}, {"weeks": 1}, None, True, False, 0, 1, -1, 0.5, 1e308, -1e-308,
    [], [None], [[]], [{}], [True, False], [1, "a", None, True, 1.5, [1], {"a": 1}],
    [True, HUGE, "1e400", {"x": [1]}, "NaN", math.inf], list(range(20_000)), ["x"] * 9_000,
]

CASES = [
    (spec(AnswerType.NUMERIC, rel_tol=0.05), 39.576),
    (spec(AnswerType.NUMERIC, lower=37.6, upper=41.6, unit="kg/m²"), 39.6),
    (spec(AnswerType.NUMERIC, kind=ValueKind.P_VALUE), 7.5e-30),
    (spec(AnswerType.NUMERIC, kind=ValueKind.PROBABILITY, abs_tol=1e-4), 0.25),
    (spec(AnswerType.NUMERIC, unit="%"), 12.5),
    (spec(AnswerType.INTEGER), 7),
    (spec(AnswerType.INTEGER, kind=ValueKind.COUNT), 2),
    (spec(AnswerType.BOOLEAN), True),
    (spec(AnswerType.SET), ["0389", "4019"]),
    (spec(AnswerType.SET), [3.5, 7]),
    (spec(AnswerType.LIST), ["2100-02-25 15:47:00", "2100-02-25 16:02:00"]),
    (spec(AnswerType.LIST, case_sensitive=True), [3, 17, 40]),
    (spec(AnswerType.STRING), "sodium chloride 0.9%"),
    (spec(AnswerType.STRING), "07/26/2014"),
    (spec(AnswerType.STRING), "(19 weeks, 6 days)"),
    (spec(AnswerType.STRING), "2100-02-25 15:47:00"),
    (spec(AnswerType.ROWS), [[1, "iv", None], [2, "po", 3.5]]),
    (spec(AnswerType.ORDERED_ROWS), [["0389", 4]]),
]


@pytest.mark.parametrize("answer_spec,truth", CASES, ids=lambda v: getattr(v, "type", None) or "")
def test_every_checker_gives_a_verdict_for_every_hostile_value(answer_spec, truth):
    for got in HOSTILE:
        start = time.perf_counter()
        result = check_value(answer_spec, truth, got)
        assert isinstance(result, CheckResult) and result.correct in (True, False) and result.reason
        if answer_spec.type != AnswerType.BOOLEAN:  # 1, [1] and True are a true True; nothing here is another truth
            assert not result.correct, (answer_spec.type, truth, str(got)[:60], result.reason)
        assert time.perf_counter() - start < 2.0, (answer_spec.type, str(got)[:60])


@pytest.fixture(scope="module")
def sandbox():
    if reason := process_backend_unavailable():
        pytest.skip(reason)
    box = open_sandbox("process")
    yield box
    box.close()


def test_the_code_checker_gives_a_verdict_for_every_hostile_value(sandbox):
    code_spec = spec(AnswerType.CODE, tests="assert double(21) == 42\n")
    for got in HOSTILE:
        result = check_code(code_spec, got, sandbox)
        assert result.correct is False and result.reason, (str(got)[:60], result)
