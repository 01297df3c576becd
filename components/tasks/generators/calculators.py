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
from components.tasks.calculators.notes import TEMPLATE_COUNT, CaseBuilder, render_note
from components.tasks.calculators.registry import BY_CATEGORY, BY_MEDCALC_NAME, CALCULATORS, CURRENT, Calculator
from components.tasks.generators.base import GenContext, task_id
from components.tasks.record import AnswerSpec, AnswerType, Domain, Task

DATASET = "synthetic_medcalc"
REL_TOL = 0.05  # MedCalc-Bench accepts numeric answers within ±5% of the ground truth


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


def answer_spec(kind: str, answer: Any) -> AnswerSpec:
    if kind == "numeric":
        lo, hi = sorted((answer * (1 - REL_TOL), answer * (1 + REL_TOL)))
        return AnswerSpec(type=AnswerType.NUMERIC, rel_tol=REL_TOL, lower=lo, upper=hi)
    if kind == "integer":
        return AnswerSpec(type=AnswerType.INTEGER)
    return AnswerSpec(type=AnswerType.STRING)


def make_task(calc: Calculator, rng: random.Random, split: str, i: int) -> Task:
    builder = CaseBuilder(rng)
    calc.build(builder)
    case = builder.case
    result = calc.formula(**case.args)
    if calc.kind == "numeric":
        answer: Any = round(float(result), calc.decimals)
    elif calc.kind == "integer":
        answer = int(result)
    else:
        answer = result
    template = rng.randrange(TEMPLATE_COUNT)
    note = render_note(case, rng, template, calc.complaints)
    prompt = f"Patient note:\n{note}\n\nQuestion: {calc.question}{CURRENT}"
    return Task(
        task_id=task_id(calc.category, split, i),
        dataset=DATASET,
        category=calc.category,
        domain=Domain.CALCULATOR,
        split=split,
        prompt=prompt,
        answer=answer,
        answer_spec=answer_spec(calc.kind, answer),
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
