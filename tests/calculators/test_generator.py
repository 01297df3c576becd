"""The calculator task generators: determinism, valid records, notes that carry every value the answer uses,
reference code that reprints the answer, distractors that differ from the current values."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from components.tasks.calculators import formulas, units
from components.tasks.calculators.notes import CaseBuilder
from components.tasks.calculators.registry import CALCULATORS
from components.tasks.generators import base
from components.tasks.generators.calculators import CALCULATOR_NAMES, GENERATORS, answer_spec, compute
from components.tasks.record import AnswerType, Domain, Task

PER_CATEGORY = 12


def _tasks(seed: int, n: int = PER_CATEGORY, split: str = "train") -> dict[str, list[Task]]:
    ctx = base.GenContext(out_dir=Path("unused"), seed=seed, split=split)
    return {g.category: list(g.generate(ctx, n)) for g in GENERATORS}


@pytest.fixture(scope="module")
def tasks() -> dict[str, list[Task]]:
    return _tasks(seed=11)


def test_registry_covers_at_least_22_calculators():
    cats = [g.category for g in GENERATORS]
    assert len(cats) >= 22 and len(set(cats)) == len(cats)
    assert all(c.startswith("calc_") for c in cats)
    assert set(CALCULATOR_NAMES) == set(cats)
    assert all(g.domain == Domain.CALCULATOR for g in GENERATORS)


def test_records_are_valid(tasks):
    for cat, ts in tasks.items():
        assert [t.task_id for t in ts] == [f"{cat}/train/{i}" for i in range(PER_CATEGORY)]
        for t in ts:
            Task.model_validate(t.model_dump())  # round-trips through the record's own validation
            assert t.dataset == "synthetic_medcalc" and t.category == cat and t.domain == Domain.CALCULATOR
            spec = t.answer_spec
            if spec.type == AnswerType.NUMERIC:
                assert isinstance(t.answer, float)
                # the window follows the precision the question asks for, not MedCalc-Bench's ±5%
                calc = next(c for c in CALCULATORS if c.category == cat)
                assert spec.rel_tol is None and spec.lower <= t.answer <= spec.upper
                assert round(t.answer, calc.decimals) == t.answer and calc.precision in t.prompt
                assert spec.upper - spec.lower <= 0.01 * abs(t.answer) + 10.0**-calc.decimals + 1e-9
            elif spec.type == AnswerType.INTEGER:
                assert isinstance(t.answer, int)
            else:
                assert re.fullmatch(r"\d\d/\d\d/\d{4}|\(\d+ weeks, \d days\)", t.answer)
            assert "Question:" in t.prompt and t.metadata["template"] in range(4)


def test_negative_answers_get_an_ordered_interval():
    spec = answer_spec("numeric", -0.828, decimals=2)
    assert spec.lower == pytest.approx(-0.828 - 0.005 - 0.0025 * 0.828)
    assert spec.upper == pytest.approx(-0.828 + 0.005 + 0.0025 * 0.828)


def test_scores_with_values_are_drawn_evenly():
    ts = _tasks(seed=2, n=200)
    for calc in CALCULATORS:
        if calc.values:
            counts = Counter(t.answer for t in ts[calc.category])
            assert set(counts) <= set(calc.values), calc.category
            assert max(counts.values()) <= 200 * (1.0 / len(calc.values) + 0.1), (calc.category, counts)


def test_same_seed_same_tasks_other_seed_other_tasks(tasks):
    again = _tasks(seed=11)
    other = _tasks(seed=12)
    for cat in tasks:
        assert [t.model_dump() for t in tasks[cat]] == [t.model_dump() for t in again[cat]]
        assert [t.prompt for t in tasks[cat]] != [t.prompt for t in other[cat]]


def test_prefix_stable_when_n_grows(tasks):
    more = _tasks(seed=11, n=PER_CATEGORY + 3)
    for cat in tasks:
        assert [t.prompt for t in more[cat][:PER_CATEGORY]] == [t.prompt for t in tasks[cat]]


def test_note_carries_every_value_the_answer_uses(tasks):
    """Each shown entity text is in the note, and every number in the argument expressions appears there too:
    re-evaluating the expressions (with the unit converters) through the formula gives the stored answer."""
    namespace = {n: getattr(units, n) for n in dir(units) if not n.startswith("_")}
    for ts in tasks.values():
        for t in ts:
            note = t.prompt.split("\n\nQuestion:")[0]
            for text in t.metadata["shown"].values():
                assert text in note, (t.task_id, text)
            calc = next(c for c in CALCULATORS if c.category == t.category)
            args = {}
            for arg, expr in t.metadata["arguments"].items():
                args[arg] = eval(expr, dict(namespace))  # expressions the generator wrote itself
                if arg in t.metadata["worded_arguments"]:  # graded from phrases (GCS, ascites, ...)
                    continue
                for number in re.findall(r"(?<![\w.])\d+(?:\.\d+)?", expr):
                    if "-" in number:
                        continue
                    # heights in inches may be shown as feet and inches; dates in three styles
                    ft_in = number.isdigit() and f"{int(number) // 12} ft {int(number) % 12} in" in note
                    assert number in note or ft_in or _iso_date_in_note(expr, note), (t.task_id, arg, expr)
            value = calc.formula(**args)
            if t.answer_spec.type == AnswerType.NUMERIC:
                assert round(value, calc.decimals) == t.answer
            else:
                assert value == t.answer


def _iso_date_in_note(expr: str, note: str) -> bool:
    m = re.search(r"(\d{4})-(\d\d)-(\d\d)", expr)
    if not m:
        return False
    y, mo, d = m.groups()
    import datetime

    date = datetime.date(int(y), int(mo), int(d))
    return any(s in note for s in (f"{mo}/{d}/{y}", date.isoformat(), f"{date.strftime('%B')} {date.day}, {y}"))


def test_reference_code_prints_the_answer(tasks, tmp_path):
    """Run two tasks per calculator in a fresh interpreter, stdlib only, and compare the last stdout line."""
    for ts in tasks.values():
        for t in ts[:2]:
            code = t.reference_code
            assert "import components" not in code and "from components" not in code
            out = subprocess.run(
                [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=20, cwd=tmp_path
            )
            assert out.returncode == 0, (t.task_id, out.stderr)
            assert json.loads(out.stdout.strip().splitlines()[-1]) == t.answer, t.task_id


def test_reference_code_contains_the_formula_source(tasks):
    import inspect

    t = tasks["calc_cockcroft_gault"][0]
    for f in (
        formulas.cockcroft_gault,
        formulas.ideal_body_weight,
        formulas.adjusted_body_weight,
        formulas.body_mass_index,
    ):
        assert inspect.getsource(f) in t.reference_code


def test_units_vary_and_conversions_are_required():
    ts = _tasks(seed=5, n=60)["calc_ckd_epi_2021"]
    used = {t.metadata["relevant_entities"]["creatinine"][1] for t in ts}
    assert used == {"mg/dL", "µmol/L"}
    si = next(t for t in ts if t.metadata["relevant_entities"]["creatinine"][1] == "µmol/L")
    assert "creatinine_umol_l_to_mg_dl(" in si.reference_code


def test_every_template_is_used():
    ts = _tasks(seed=3, n=40)["calc_anion_gap"]
    assert {t.metadata["template"] for t in ts} == {0, 1, 2, 3}


def test_prior_values_are_dated_and_differ_from_current():
    for seed in range(30):
        b = CaseBuilder(random.Random(seed))
        b.quantity("creatinine_mg_dl", "creatinine", 0.5, 4.0, prior=1.0)
        priors = [f.text for f in b.case.facts if f.section == "prior"]
        current = b.case.shown["creatinine"]
        for text in priors:
            assert current not in text and re.search(r"ago|earlier", text)


def test_distractor_labs_never_repeat_a_used_quantity(tasks):
    # an analyte the calculator reads is named once among the current values; older values carry a date
    for t in tasks["calc_anion_gap"]:
        note = t.prompt.split("\n\nQuestion:")[0]
        clauses = [c for c in re.split(r"[.;]\s|\n", note) if not re.search(r"\bago\b|\bearlier\b", c)]
        assert sum(len(re.findall(r"\bchloride\b", c, flags=re.I)) for c in clauses) == 1, t.task_id


def test_scores_stay_in_range_and_straddle_cut_offs():
    ts = _tasks(seed=9, n=150)
    ranges = {
        "calc_cha2ds2_vasc": (0, 9),
        "calc_has_bled": (0, 9),
        "calc_gcs": (3, 15),
        "calc_child_pugh": (5, 15),
        "calc_curb65": (0, 5),
        "calc_centor": (-1, 5),
        "calc_wells_dvt": (-2, 9),
        "calc_meld_na": (6, 40),
        "calc_sirs": (0, 4),
        "calc_perc": (0, 8),
        "calc_feverpain": (0, 5),
        "calc_glasgow_blatchford": (0, 23),
    }
    for cat, (lo, hi) in ranges.items():
        answers = [t.answer for t in ts[cat]]
        assert all(lo <= a <= hi for a in answers), cat
        assert len(set(answers)) >= 4, (cat, sorted(set(answers)))


def test_compute_by_medcalc_name_or_category():
    assert compute("Anion Gap", sodium=139, chloride=104, bicarbonate=20) == 15
    assert compute("calc_anion_gap", sodium=139, chloride=104, bicarbonate=20) == 15
    with pytest.raises(KeyError, match="unknown calculator"):
        compute("APACHE II Score")
