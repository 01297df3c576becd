"""Biostatistics task generators: N-PowerAI-style power/sample size, hypothesis tests and survival over CSVs.

Context CSVs are shared by up to `per_file` consecutive tasks of a category (fewer where a file has few
distinct questions) and live at files/biostat/<category>/<split>/<group>.csv under ctx.out_dir. Every
answer is computed by calling the same module-level function whose source is embedded in the task's
reference_code. No prompt repeats within a generator call.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from components.common.io import atomic_write
from components.tasks.biostat import data, power, survival, tabular
from components.tasks.biostat.power_questions import BUILDERS
from components.tasks.generators.base import GenContext, task_id
from components.tasks.generators.filetasks import Question, file_task, questions_per_file
from components.tasks.generators.refcode import RefProgram
from components.tasks.record import AnswerSpec, AnswerType, Domain, Task

DATASET = "synthetic_biostat"
TASKS_PER_FILE = 10
P_VALUE = AnswerSpec(type=AnswerType.NUMERIC, rel_tol=1e-3, abs_tol=1e-5)
STATISTIC = AnswerSpec(type=AnswerType.NUMERIC, rel_tol=1e-3, abs_tol=1e-6)
PROBABILITY = AnswerSpec(type=AnswerType.NUMERIC, abs_tol=1e-4)
UNROUNDED = "Report the unrounded value (at least 6 significant digits)."
# power prompts name no file, so train and test could draw the same one; a digest of the prompt gives every
# possible prompt to exactly one of these splits, so they draw from disjoint halves of the same distribution
PARTITIONED_SPLITS = ("train", "test")


def _belongs_to(prompt: str, split: str) -> bool:
    """Whether `split` may ask `prompt`; splits outside PARTITIONED_SPLITS may ask anything."""
    if split not in PARTITIONED_SPLITS:
        return True
    digest = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:8], "big")
    return PARTITIONED_SPLITS[digest % len(PARTITIONED_SPLITS)] == split


@dataclass(frozen=True)
class PowerGenerator:
    """Sample size (integer, smallest n reaching the power) or power (numeric) questions; half of each."""

    category: str
    domain: ClassVar[Domain] = Domain.BIOSTAT

    def generate(self, ctx: GenContext, n: int) -> Iterator[Task]:
        rng = ctx.rng(self.category)
        build = BUILDERS[self.category]
        helpers = [power.t_power, power.cohen_h, power.normal_power, power.smallest_n]
        programs: dict[str, RefProgram] = {}
        seen: set[str] = set()
        for i in range(n):
            while True:  # the space of stories and numbers is large: a repeat is rare and one redraw fixes it
                target = "size" if rng.random() < 0.5 else "power"
                q = build(rng, target)
                if q.prompt not in seen and _belongs_to(q.prompt, ctx.split):
                    seen.add(q.prompt)
                    break
            fn = getattr(power, q.func)
            if q.func not in programs:
                programs[q.func] = RefProgram(power.IMPORTS, [*helpers, fn])
            answer = fn(**q.kwargs)
            spec = (AnswerSpec(type=AnswerType.INTEGER) if target == "size"
                    else AnswerSpec(type=AnswerType.NUMERIC, abs_tol=1e-3))
            yield Task(
                task_id=task_id(self.category, ctx.split, i), dataset=DATASET, category=self.category,
                domain=self.domain, split=ctx.split, prompt=q.prompt, answer=answer, answer_spec=spec,
                reference_code=programs[q.func].render(q.func, **q.kwargs),
                metadata={"estimate_target": target, "parameters": q.kwargs},
            )


def _usable(answer: Any) -> Any:
    """The answer, or None where a filter left too few rows for a statistic (NaN): such draws are redrawn."""
    return answer if isinstance(answer, int) or math.isfinite(answer) else None


def _write_once(ctx: GenContext, rel: str, text: str) -> None:
    with atomic_write(ctx.out_dir / rel) as fh:
        fh.write(text)


def _csv_path(ctx: GenContext, category: str, group: int) -> str:
    return f"files/biostat/{category}/{ctx.split}/{group:05d}.csv"


def _task(gen: Any, ctx: GenContext, i: int, rel: str, q: Question, answer: Any, program: RefProgram) -> Task:
    return file_task(dataset=DATASET, category=gen.category, domain=gen.domain, ctx=ctx, i=i, rel=rel, kind="csv",
                     q=q, answer=answer, program=program)


@dataclass(frozen=True)
class CsvGenerator:
    """Draws one CSV per `per_file` tasks, then distinct questions about it."""

    category: str
    make_file: Callable[[random.Random], str]
    ask: Callable[[random.Random, str], Question]  # (rng, relative path) -> question
    imports: tuple[str, ...]
    funcs: tuple[Callable[..., Any], ...]  # helpers first, then the entry points a question may call
    per_file: int = TASKS_PER_FILE
    domain: ClassVar[Domain] = Domain.BIOSTAT

    def generate(self, ctx: GenContext, n: int) -> Iterator[Task]:
        rng = ctx.rng(self.category)
        program = RefProgram(self.imports, self.funcs)

        def open_file(group: int) -> str:
            rel = _csv_path(ctx, self.category, group)
            _write_once(ctx, rel, self.make_file(rng))
            return rel

        triples = questions_per_file(n, self.per_file, open_file, lambda rel: self.ask(rng, rel),
                                     lambda rel, q: _usable(q.func(str(ctx.out_dir / rel), *q.args)))
        for i, (rel, q, answer) in enumerate(triples):
            yield _task(self, ctx, i, rel, q, answer, program)


# ---- cohort questions -------------------------------------------------------------------------------------

LABELS = {"age": "age (years)", "bmi": "BMI (bmi, kg/m^2)", "sbp": "systolic blood pressure (sbp, mmHg)",
          "ldl": "LDL cholesterol (ldl, mg/dL)", "hba1c": "HbA1c (hba1c, %)"}
GROUPINGS = (("arm", "treatment", "placebo"), ("sex", "F", "M"))


def _cohort(rng: random.Random) -> str:
    return data.cohort_csv(rng, rng.randint(80, 400))


def _intro(rel: str) -> str:
    return (f"The file {rel} (CSV, one row per patient; columns {', '.join(data.COHORT_COLUMNS)}; empty cells "
            f"are missing values) holds data from a clinical trial.")


def ask_ttest(rng: random.Random, rel: str) -> Question:
    value = rng.choice(("sbp", "ldl", "bmi", "hba1c", "age"))
    col, a, b = rng.choice(GROUPINGS)
    a, b = (a, b) if rng.random() < 0.5 else (b, a)
    equal_var = rng.random() < 0.5
    stat = rng.choice(("statistic", "pvalue"))
    kind = ("Student's two-sample t-test assuming equal variances (scipy.stats.ttest_ind with equal_var=True)"
            if equal_var else "Welch's two-sample t-test (scipy.stats.ttest_ind with equal_var=False)")
    what = (f"the t statistic, with {col} = '{a}' as the first sample (so a positive value means a higher mean "
            f"in '{a}')" if stat == "statistic" else "the two-sided p-value")
    prompt = (f"{_intro(rel)} Compare {LABELS[value]} between patients with {col} = '{a}' and {col} = '{b}' using "
              f"{kind}, excluding patients whose {value} is missing. Report {what}. {UNROUNDED}")
    return Question(prompt, tabular.two_sample_ttest, (value, col, a, b, equal_var, stat),
                    STATISTIC if stat == "statistic" else P_VALUE)


CHI2_PAIRS = (("arm", "response"), ("sex", "smoker"), ("arm", "diabetes"), ("sex", "response"),
              ("smoker", "diabetes"), ("diabetes", "response"), ("sex", "diabetes"), ("arm", "smoker"),
              ("smoker", "response"), ("arm", "sex"))


def ask_chi2(rng: random.Random, rel: str) -> Question:
    row, col = rng.choice(CHI2_PAIRS)
    correction = rng.random() < 0.5
    stat = rng.choice(("statistic", "pvalue"))
    corr = ("with Yates' continuity correction (scipy.stats.chi2_contingency with correction=True)" if correction
            else "without continuity correction (scipy.stats.chi2_contingency with correction=False)")
    what = "the chi-square statistic" if stat == "statistic" else "the p-value"
    prompt = (f"{_intro(rel)} Build the contingency table of {row} by {col} over all patients and run Pearson's "
              f"chi-square test of independence {corr}. Report {what}. {UNROUNDED}")
    return Question(prompt, tabular.chi2_independence, (row, col, correction, stat),
                    STATISTIC if stat == "statistic" else P_VALUE)


def ask_mann_whitney(rng: random.Random, rel: str) -> Question:
    value = rng.choice(("sbp", "ldl", "bmi", "hba1c", "age"))
    col, a, b = rng.choice(GROUPINGS)
    a, b = (a, b) if rng.random() < 0.5 else (b, a)
    stat = rng.choice(("statistic", "pvalue"))
    what = (f"the U statistic of the first sample ({col} = '{a}'), as scipy.stats.mannwhitneyu(x, y) returns it "
            f"with x = the '{a}' values" if stat == "statistic"
            else "the two-sided p-value from the normal approximation with continuity correction "
                 "(scipy.stats.mannwhitneyu with method='asymptotic', use_continuity=True)")
    prompt = (f"{_intro(rel)} Compare {LABELS[value]} between patients with {col} = '{a}' and {col} = '{b}' with "
              f"a two-sided Mann-Whitney U test, excluding patients whose {value} is missing. Report {what}. "
              f"{UNROUNDED}")
    return Question(prompt, tabular.mann_whitney, (value, col, a, b, stat),
                    STATISTIC if stat == "statistic" else P_VALUE)


CORR_PAIRS = tuple(itertools.combinations(data.NUMERIC, 2))


def ask_correlation(rng: random.Random, rel: str) -> Question:
    x, y = rng.choice(CORR_PAIRS)
    method = rng.choice(("pearson", "spearman"))
    stat = rng.choice(("statistic", "statistic", "pvalue"))
    name = "Pearson" if method == "pearson" else "Spearman rank"
    what = "the correlation coefficient" if stat == "statistic" else "the two-sided p-value (as scipy.stats reports)"
    prompt = (f"{_intro(rel)} Compute the {name} correlation between {LABELS[x]} and {LABELS[y]}, using only "
              f"patients with both values present. Report {what}. {UNROUNDED}")
    return Question(prompt, tabular.correlation, (x, y, method, stat),
                    STATISTIC if stat == "statistic" else P_VALUE)


def ask_regression(rng: random.Random, rel: str) -> Question:
    outcome = rng.choice(("sbp", "ldl", "hba1c"))
    pool = [p for p in ("age", "bmi", "smoker", "diabetes") if p != outcome]
    predictors = rng.sample(pool, rng.randint(1, 3))
    term = rng.choice(predictors) if rng.random() < 0.9 else "intercept"
    what = "intercept" if term == "intercept" else f"coefficient of {term}"
    prompt = (f"{_intro(rel)} Fit an ordinary least squares linear regression of {outcome} on "
              f"{', '.join(predictors)} (in that order, all used as numeric columns, smoker and diabetes coded 0/1 "
              f"as in the file) with an intercept, using only patients with no missing value in any of these "
              f"columns. Report the estimated {what}. {UNROUNDED}")
    return Question(prompt, tabular.ols_coefficient, (outcome, predictors, term), STATISTIC)


def _filters(rng: random.Random) -> list[tuple[str, str, Any]]:
    pool: list[tuple[str, str, Any]] = [
        ("sex", "==", rng.choice("FM")), ("arm", "==", rng.choice(("treatment", "placebo"))),
        ("age", rng.choice((">=", "<")), rng.choice((50, 55, 60, 65, 70))), ("smoker", "==", rng.choice((0, 1))),
        ("diabetes", "==", rng.choice((0, 1))), ("bmi", rng.choice((">=", "<")), rng.choice((25, 30))),
    ]
    return rng.sample(pool, rng.randint(1, 3))


def _describe(filters: list[tuple[str, str, Any]]) -> str:
    return " and ".join(f"{c} {op} {v!r}" if isinstance(v, str) else f"{c} {op} {v}" for c, op, v in filters)


def ask_summary(rng: random.Random, rel: str) -> Question:
    filters = _filters(rng)
    summary = rng.choice(("mean", "mean", "median", "std", "count"))
    value = rng.choice(("sbp", "ldl", "bmi", "hba1c", "age"))
    where = (f"patients meeting all of: {_describe(filters)} (a patient whose value in a filtered column is "
             f"missing does not meet that condition)")
    if summary == "count":
        prompt = f"{_intro(rel)} How many {where}? Answer with an integer."
        return Question(prompt, tabular.filtered_summary, (None, summary, filters), AnswerSpec(type=AnswerType.INTEGER))
    word = {"mean": "mean", "median": "median", "std": "sample standard deviation (n - 1 denominator)"}[summary]
    prompt = (f"{_intro(rel)} Among {where}, what is the {word} of {LABELS[value]}? Ignore patients whose {value} "
              f"is missing. {UNROUNDED}")
    return Question(prompt, tabular.filtered_summary, (value, summary, filters), STATISTIC)


# ---- survival questions -----------------------------------------------------------------------------------

SURV_CONVENTIONS = ("Use the Kaplan-Meier estimator; S(t) is right-continuous, so events at time t lower S(t); "
                    "censored patients are at risk at their censoring time.")


@dataclass(frozen=True)
class SurvFile:
    groups: tuple[str, str]
    last_time: float  # the earliest of the groups' last follow-up times: S(t) is defined below it everywhere


def _survival_file(rng: random.Random) -> tuple[str, SurvFile]:
    """Redraw until each group's Kaplan-Meier curve reaches 0.5 without touching it exactly (median unambiguous)."""
    while True:
        groups = rng.choice(data.SURVIVAL_GROUPS)
        text = data.survival_csv(rng, rng.randint(20, 80), groups)
        rows = [line.split(",") for line in text.splitlines()[1:]]
        ok = True
        for subset in ([r for r in rows if r[3] == groups[0]], [r for r in rows if r[3] == groups[1]], rows):
            _, surv = survival.km_curve([float(r[1]) for r in subset], [int(r[2]) for r in subset])
            if not len(surv) or surv[-1] > 0.5 or any(abs(s - 0.5) < 1e-9 for s in surv):
                ok = False
        if ok:
            last = min(max(float(r[1]) for r in rows if r[3] == g) for g in groups)
            return text, SurvFile(groups, last)


def _surv_intro(rel: str) -> str:
    return (f"The file {rel} (CSV with columns patient_id, time, event, group) holds follow-up data: time is days "
            f"from enrolment to the event or to censoring, event is 1 for an observed event and 0 for censored.")


def ask_km_median(rng: random.Random, rel: str, info: SurvFile) -> Question:
    groups = info.groups
    group = rng.choice((groups[0], groups[1], None))
    who = f"patients in group '{group}'" if group else "all patients together (ignoring group)"
    prompt = (f"{_surv_intro(rel)} {SURV_CONVENTIONS} What is the Kaplan-Meier median survival time, in days, for "
              f"{who}? Define the median as the smallest observed time t with S(t) <= 0.5.")
    return Question(prompt, survival.km_median, ("group", group), AnswerSpec(type=AnswerType.NUMERIC, abs_tol=1e-6))


KM_TIMES = (30, 60, 90, 120, 180, 240, 270, 365, 450, 540, 730, 900, 1000)


def ask_km_at(rng: random.Random, rel: str, info: SurvFile) -> Question:
    group = rng.choice((info.groups[0], info.groups[1], None))
    t = rng.choice([t for t in KM_TIMES if t < info.last_time] or [30])
    who = f"patients in group '{group}'" if group else "all patients together (ignoring group)"
    prompt = (f"{_surv_intro(rel)} {SURV_CONVENTIONS} What is the Kaplan-Meier estimate of the survival "
              f"probability S({t}) at t = {t} days for {who}? Give a probability between 0 and 1. {UNROUNDED}")
    return Question(prompt, survival.km_survival_at, ("group", group, t), PROBABILITY)


def ask_logrank(rng: random.Random, rel: str, info: SurvFile) -> Question:
    groups = info.groups
    stat = rng.choice(("statistic", "pvalue"))
    what = ("the log-rank chi-square statistic (1 degree of freedom)" if stat == "statistic"
            else "the p-value (chi-square distribution with 1 degree of freedom)")
    prompt = (f"{_surv_intro(rel)} Compare survival between group '{groups[0]}' and group '{groups[1]}' with the "
              f"log-rank test (the standard Mantel-Haenszel form, hypergeometric variance, tied event times "
              f"handled together). Report {what}. {UNROUNDED}")
    return Question(prompt, survival.logrank, ("group", groups[0], groups[1], stat),
                    STATISTIC if stat == "statistic" else P_VALUE)


@dataclass(frozen=True)
class SurvivalGenerator:
    category: str
    ask: Callable[[random.Random, str, SurvFile], Question]
    per_file: int = TASKS_PER_FILE
    domain: ClassVar[Domain] = Domain.BIOSTAT

    def generate(self, ctx: GenContext, n: int) -> Iterator[Task]:
        rng = ctx.rng(self.category)
        program = RefProgram(survival.IMPORTS, (survival.km_curve, survival._subset, survival.km_median,
                                                survival.km_survival_at, survival.logrank))

        def open_file(group: int) -> tuple[str, SurvFile]:
            rel = _csv_path(ctx, self.category, group)
            text, info = _survival_file(rng)
            _write_once(ctx, rel, text)
            return rel, info

        triples = questions_per_file(n, self.per_file, open_file, lambda f: self.ask(rng, *f),
                                     lambda f, q: q.func(str(ctx.out_dir / f[0]), *q.args))
        for i, ((rel, _), q, answer) in enumerate(triples):
            yield _task(self, ctx, i, rel, q, answer, program)


_TAB = tabular.IMPORTS
GENERATORS = [
    *(PowerGenerator(c) for c in BUILDERS),
    CsvGenerator("biostat_ttest_csv", _cohort, ask_ttest, _TAB, (tabular.two_sample_ttest,)),
    CsvGenerator("biostat_chi2_csv", _cohort, ask_chi2, _TAB, (tabular.chi2_independence,)),
    CsvGenerator("biostat_mann_whitney_csv", _cohort, ask_mann_whitney, _TAB, (tabular.mann_whitney,)),
    CsvGenerator("biostat_correlation_csv", _cohort, ask_correlation, _TAB, (tabular.correlation,)),
    CsvGenerator("biostat_regression_csv", _cohort, ask_regression, _TAB, (tabular.ols_coefficient,)),
    CsvGenerator("biostat_filtered_summary_csv", _cohort, ask_summary, _TAB, (tabular.filtered_summary,)),
    # a survival file has three medians (each group, all) and one log-rank test (statistic, p-value)
    SurvivalGenerator("biostat_km_median", ask_km_median, per_file=2),
    SurvivalGenerator("biostat_km_survival_at", ask_km_at),
    SurvivalGenerator("biostat_logrank", ask_logrank, per_file=2),
]
