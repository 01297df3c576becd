"""Clinical-calculator tasks (the MedCalc-Bench domain): a patient note, a MedCalc-Bench style question, the
answer from `components.tasks.calculators.formulas`, and reference code built from the same function's source.

Entry points: `GENERATORS` (one generator per calculator, category `calc_<slug>`), `CALCULATOR_NAMES`
(category -> MedCalc-Bench calculator name), `compute(name, **arguments)` (run a calculator by its
MedCalc-Bench name or category on arguments in the formula's units), `make_task(calc, rng, split, i)`.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from components.tasks.calculators import formulas, units
from components.tasks.calculators.notes import TEMPLATE_COUNT, Case, CaseBuilder, render_note
from components.tasks.calculators.registry import BY_CATEGORY, BY_MEDCALC_NAME, CALCULATORS, CURRENT, Calculator
from components.tasks.generators.base import GenContext, task_id
from components.tasks.record import AnswerSpec, AnswerType, Domain, Task

DATASET = "synthetic_medcalc"
# Numeric answers are accepted within half a unit of the last decimal the question asks for, widened by
# REL_SLACK of the value: references differ in their conversion constants by up to about that much
# (2.2 vs 2.20462 lb/kg, 4 vs 4.008 mg/dL per mmol/L of calcium), and a solver using either is right.
# MedCalc-Bench's own ±5% stays with its imported rows: over generated values that cluster (QTc, corrected
# sodium) a ±5% window let one constant answer pass on up to half the tasks.
REL_SLACK = 0.0025
# integer scores with `values`: patients drawn per task while looking for the drawn score; the rarest
# scores take a few hundred draws, and after this many the closest draw is kept
MAX_DRAWS = 3000


def _formula_closure(func: Callable[..., Any]) -> list[Callable[..., Any]]:
    """The function and every function of `formulas` it calls, callees first."""
    order: list[Callable[..., Any]] = []

    def visit(f: Callable[..., Any]) -> None:
        for name in f.__code__.co_names:
            dep = getattr(formulas, name, None)
            if inspect.isfunction(dep) and dep.__module__ == formulas.__name__ and dep not in order and dep is not f:
                visit(dep)
        if f not in order:
            order.append(f)

    visit(func)
    return order


@cache
def _source(func: Callable[..., Any]) -> str:
    return inspect.getsource(func)


@cache
def _formula_block(func: Callable[..., Any]) -> str:
    return "\n\n".join(_source(f) for f in _formula_closure(func))


def reference_code(calc: Calculator, exprs: dict[str, str], converters: list[str]) -> str:
    """A stdlib-only program printing the answer as JSON on its last line."""
    conv = "\n\n".join(_source(getattr(units, name)) for name in sorted(converters))
    call = ",\n    ".join(f"{k}={v}" for k, v in exprs.items())
    if calc.kind == "numeric":
        out = f"round(result, {calc.decimals})"
    elif calc.kind == "integer":
        out = "int(result)"
    else:
        out = "result"
    parts = ["from __future__ import annotations", "", "import datetime", "import json", "import math", ""]
    if conv:
        parts += [conv, ""]
    parts += [
        _formula_block(calc.formula),
        "",
        f"result = {calc.formula.__name__}(\n    {call},\n)",
        f"print(json.dumps({out}))",
        "",
    ]
    return "\n".join(parts)


def answer_spec(kind: str, exact: Any, decimals: int = 3) -> AnswerSpec:
    """How a generated calculator answer is checked; `exact` is the unrounded result for numeric answers."""
    if kind == "numeric":
        # centred on the exact value: a correctly rounded answer is always inside, whichever way it rounded
        half = 0.5 * 10.0**-decimals + REL_SLACK * abs(exact)
        return AnswerSpec(type=AnswerType.NUMERIC, lower=exact - half, upper=exact + half)
    if kind == "integer":
        return AnswerSpec(type=AnswerType.INTEGER)
    return AnswerSpec(type=AnswerType.STRING)


def draw_case(calc: Calculator, rng: random.Random) -> tuple[Case, Any]:
    """One patient and its result; for scores with `values`, a patient whose score is a uniformly drawn value.

    Sampling each criterion independently piles the scores up in the middle (a third of CURB-65 scores were
    2), which a constant answer exploits; redrawing until the score matches a uniform target flattens them.
    """
    target = rng.choice(calc.values) if calc.values else None
    closest: tuple[Case, Any] | None = None
    for _ in range(MAX_DRAWS if calc.values else 1):
        builder = CaseBuilder(rng)
        calc.build(builder)
        result = calc.formula(**builder.case.args)
        if target is None or result == target:
            return builder.case, result
        if closest is None or abs(result - target) < abs(closest[1] - target):
            closest = (builder.case, result)
    assert closest is not None
    return closest


def make_task(calc: Calculator, rng: random.Random, split: str, i: int) -> Task:
    case, result = draw_case(calc, rng)
    if calc.kind == "numeric":
        answer: Any = round(float(result), calc.decimals)
    elif calc.kind == "integer":
        answer = int(result)
    else:
        answer = result
    template = rng.randrange(TEMPLATE_COUNT)
    note = render_note(case, rng, template, calc.complaints)
    prompt = f"Patient note:\n{note}\n\nQuestion: {calc.question}{calc.precision}{CURRENT}"
    return Task(
        task_id=task_id(calc.category, split, i),
        dataset=DATASET,
        category=calc.category,
        domain=Domain.CALCULATOR,
        split=split,
        prompt=prompt,
        answer=answer,
        answer_spec=answer_spec(calc.kind, float(result) if calc.kind == "numeric" else answer, calc.decimals),
        reference_code=reference_code(calc, case.exprs, case.converters),
        metadata={
            "calculator": calc.name,
            "medcalc_id": calc.medcalc_id,
            "relevant_entities": case.entities,
            "shown": case.shown,
            "arguments": case.exprs,
            "worded_arguments": case.worded,
            "template": template,
        },
    )


@dataclass(frozen=True)
class CalculatorGenerator:
    calc: Calculator
    domain: Domain = Domain.CALCULATOR

    @property
    def category(self) -> str:
        return self.calc.category

    def generate(self, ctx: GenContext, n: int) -> Iterator[Task]:
        rng = ctx.rng(self.category)
        for i in range(n):
            yield make_task(self.calc, rng, ctx.split, i)


GENERATORS: list[CalculatorGenerator] = [CalculatorGenerator(c) for c in CALCULATORS]
CALCULATOR_NAMES: dict[str, str] = {c.category: c.name for c in CALCULATORS}


def compute(name: str, **arguments: Any) -> Any:
    """Run a calculator by MedCalc-Bench name or by category, on arguments in the formula's own units."""
    calc = BY_MEDCALC_NAME.get(name) or BY_CATEGORY.get(name)
    if calc is None:
        raise KeyError(f"unknown calculator {name!r}; known: {sorted(BY_MEDCALC_NAME)}")
    return calc.formula(**arguments)
