"""Issue 23, section 5, the holes a review found after the first fix: a table cell and a list or set element compare
as the truth's JSON type says. A string of the truth is a code or a text (matched by that text alone, a timestamp
in any of its ISO forms), a number of the truth is matched by value; a truth written as a JSON string holds the
same codes as the list it spells."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from components.tasks.checkers import check_value
from components.tasks.importers.ehrsql import answer_spec_for, release_rows
from components.tasks.record import AnswerSpec, AnswerType

ROWS = AnswerSpec(type=AnswerType.ROWS, case_sensitive=True)
ORDERED = AnswerSpec(type=AnswerType.ORDERED_ROWS, case_sensitive=True)
STAMP = "2100-02-25 15:47:00"


def verdicts(spec: AnswerSpec, truth: Any, answers: list[Any]) -> list[bool]:
    return [check_value(spec, truth, got).correct for got in answers]


# ---- 1. table cells ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [ROWS, ORDERED], ids=["rows", "ordered"])
def test_a_timestamp_cell_equals_its_iso_form_only(spec):
    truth = [[STAMP, "po"], ["2100-02-26 08:00:00", "iv"]]
    iso = [[STAMP.replace(" ", "T"), "po"], ["2100-02-26T08:00:00.000", "iv"]]
    assert check_value(spec, truth, iso).correct
    assert check_value(spec, truth, [c for row in iso for c in row]).correct  # the release's flat form
    for wrong in ("2100-02-25T15:47", "2100-02-25T15:47:00Z", "2100-02-25T15:47:01", "2100-02-25"):
        assert not check_value(spec, truth, [[wrong, "po"], ["2100-02-26 08:00:00", "iv"]]).correct, wrong


def test_a_code_cell_is_matched_by_its_text_alone():
    codes = [["0389"], ["4019"]]
    assert verdicts(ROWS, codes, [["0389", "4019"], [" 0389", "4019 "], ["0389", 4019], [["4019"], ["0389"]]]) == [True] * 4
    wrong = [["389", "4019"], [389, 4019], ["0389", "4019.000"], ["0389", "4019.0"], ["0389", 4019.0], ["0389", "4.019e3"]]
    assert verdicts(ROWS, codes, wrong) == [False] * len(wrong)
    assert not check_value(ROWS, [["389"]], ["0389"]).correct


def test_a_number_cell_is_matched_by_value():
    assert verdicts(ROWS, [[10.52, "a"]], [[10.52, "a"], ["10.52", "a"], [10.5200000001, "a"]]) == [True] * 3
    assert verdicts(ROWS, [[10.52, "a"]], [[10.5, "a"], ["10.5", "a"], ["10.52 mg", "a"]]) == [False] * 3
    assert verdicts(ROWS, [[4019]], [["4019"], [4019.0], ["4019.000"]]) == [True] * 3


def test_a_column_of_codes_and_numbers_as_the_release_types_it():
    """The release writes every cell as text; imported, '4019' becomes the number 4019 and '0389' stays text."""
    truth = release_rows(["4019", "0389"], 1)
    assert truth == [[4019], ["0389"]]
    assert check_value(ROWS, truth, ["4019", "0389"]).correct  # the release's own answer
    assert check_value(ROWS, truth, [4019, "0389"]).correct
    assert not check_value(ROWS, truth, ["4019", "389"]).correct
    assert not check_value(ROWS, truth, ["4019", 389]).correct


def test_true_answers_of_a_real_query_pass_in_every_form_the_database_gives(tmp_path: Path):
    """A re-grounded truth is the query's result as SQLite types it: text columns (codes, times) and numbers."""
    con = sqlite3.connect(tmp_path / "ehr.sqlite")
    con.execute("CREATE TABLE dx (icd9_code TEXT, charttime TEXT, cost REAL, n INTEGER)")
    con.executemany("INSERT INTO dx VALUES (?, ?, ?, ?)",
                    [("0389", STAMP, 12.5, 3), ("4019", "2100-03-01 10:00:00", 7.0, 1)])
    sql = "SELECT icd9_code, charttime, cost, n FROM dx ORDER BY charttime"
    truth = json.loads(json.dumps([list(r) for r in con.execute(sql)]))
    spec = answer_spec_for(sql)
    assert spec.type == AnswerType.ORDERED_ROWS
    as_pandas = [["0389", STAMP.replace(" ", "T"), 12.5, 3], ["4019", "2100-03-01T10:00:00", 7, 1.0]]
    as_text = [[str(c) for c in row] for row in truth]
    for got in (truth, as_pandas, as_text, [c for row in truth for c in row]):
        assert check_value(spec, truth, got).correct, got
    assert not check_value(spec, truth, [["389", STAMP, 12.5, 3], ["4019", "2100-03-01 10:00:00", 7.0, 1]]).correct


# ---- 2. set and list elements --------------------------------------------------------------------------------


@pytest.mark.parametrize("answer_type", [AnswerType.SET, AnswerType.LIST])
@pytest.mark.parametrize("truth", [["0389", "4019"], '["0389", "4019"]', "['0389', '4019']", ["0389", 4019]],
                         ids=["list", "json-text", "python-text", "code-and-number"])
def test_codes_are_text_whatever_form_the_truth_is_stored_in(answer_type, truth):
    spec = AnswerSpec(type=answer_type)
    assert verdicts(spec, truth, [["0389", "4019"], '["0389", "4019"]', ["0389", 4019]]) == [True] * 3
    assert verdicts(spec, truth, [["389", "4019"], ["389", 4019], [389, 4019], ["0389", "4018"]]) == [False] * 4
    if truth != ["0389", 4019]:  # there 4019 is a number of the truth, which 4019.000 is
        assert not check_value(spec, truth, ["0389", "4019.000"]).correct


@pytest.mark.parametrize("answer_type", [AnswerType.SET, AnswerType.LIST])
def test_a_truth_held_as_json_text_keeps_numbers_by_value_and_timestamps_in_iso_form(answer_type):
    spec = AnswerSpec(type=answer_type)
    assert check_value(spec, "[3, 17, 40]", ["3", 17.0, "40.000"]).correct
    assert not check_value(spec, "[3, 17, 40]", [3, 17, 41]).correct
    assert check_value(spec, json.dumps([STAMP]), [STAMP.replace(" ", "T")]).correct
    assert not check_value(spec, json.dumps([STAMP]), [STAMP.replace(" ", "T") + "Z"]).correct


def test_the_reason_shows_the_elements_as_compared():
    result = check_value(AnswerSpec(type=AnswerType.SET), ["0389", "4019"], ["389", "4019"])
    assert result.reason == "missing ['0389'], unexpected ['389.0']"
    result = check_value(AnswerSpec(type=AnswerType.LIST), ["0389", "4019"], ["0389", "4019.000"])
    assert result.reason == "element 1 differs: '4019.0' != '4019'"
