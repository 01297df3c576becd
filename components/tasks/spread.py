"""How much a constant answer earns per category: the share of tasks on which the single most successful
constant is accepted by each task's own checker, and the entropy of the answers.

A policy trained on a category whose answers cluster learns the cluster, not the task, so every generated
category is held to `spread_bound(n)`: a uniform draw over the n distinct answers (at most 10 count) plus
SLACK. Every verdict here comes from the real checker (`checkers.check_answer`); the search only decides
which constants to try, and does so in time linear in the tasks for numeric answers:

- Tasks with the same truth and the same answer spec give the same verdict on any submission, so each such
  group is checked once, through one representative, and weighs as many tasks as it holds.
- Numeric answers: a tolerance makes each task accept an interval around its truth; the interval's ends are
  found by bisection with the checker, and a sweep over all ends finds the point inside the most intervals
  (a constant can win there without equalling any truth). The median and the commonest truths are tried too.
- Other answers: the candidates are the distinct truths, commonest first (a constant matching no truth can
  only pass where the checker treats two different values as equal, which a truth also exposes).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pydantic import BaseModel, computed_field

from components.tasks.checkers import check_answer
from components.tasks.generators.balance import answer_key
from components.tasks.record import AnswerType, Task

SLACK = 0.10  # points a constant may earn above a uniform draw over min(n, 10) answers
MAX_CANDIDATES = 100  # distinct truths tried per category, commonest first
TOP_TRUTHS = 20  # numeric categories: truths tried besides the sweep's point and the median
SWEEP_POINTS = 10  # numeric categories: the densest segments of the sweep tried
MAX_DOUBLINGS = 2100  # enough to grow from a millionth of the smallest double to the largest


class Spread(BaseModel):
    category: str
    tasks: int
    distinct: int  # distinct true answers
    entropy_bits: float
    best_constant: Any  # the constant accepted on the most tasks
    best_share: float  # the share of tasks accepting it
    bound: float

    @computed_field  # type: ignore[prop-decorator]
    @property
    def within_bound(self) -> bool:
        return self.best_share <= self.bound + 1e-12


def spread_bound(distinct: int) -> float:
    """The most a constant may earn: a uniform draw over the answers (at most 10 count) plus SLACK."""
    return 1.0 / min(max(distinct, 1), 10) + SLACK


def entropy_bits(keys: Iterable[str]) -> float:
    counts = Counter(keys)
    total = sum(counts.values())
    return -sum(c / total * math.log2(c / total) for c in counts.values()) if total else 0.0


Group = tuple[Task, int]  # a representative task and how many tasks share its truth and spec


def groups(tasks: Sequence[Task]) -> list[Group]:
    """Tasks grouped by (truth, spec), commonest truth first."""
    found: dict[tuple[str, str], list[Any]] = {}
    for t in tasks:
        key = (answer_key(t.answer), t.answer_spec.model_dump_json())
        if key in found:
            found[key][1] += 1
        else:
            found[key] = [t, 1]
    return sorted(((t, n) for t, n in found.values()), key=lambda g: -g[1])


def accepted_by(gs: Sequence[Group], constant: Any) -> int:
    """How many tasks (through their groups' representatives) accept `constant`."""
    return sum(n for t, n in gs if check_answer(t, constant).correct)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _edge(accepts: Callable[[float], bool], truth: float, direction: float) -> float:
    """The last number from `truth` in `direction` the task accepts, to the float (it accepts an interval)."""
    inner, step = truth, (abs(truth) or 1.0) * 1e-6
    for _ in range(MAX_DOUBLINGS):
        outer = truth + direction * step
        if not math.isfinite(outer):
            return direction * math.inf
        if not accepts(outer):
            break
        inner, step = outer, step * 2
    else:
        return direction * math.inf
    while True:  # halve [inner, outer] until no float lies between them
        mid = (inner + outer) / 2
        if mid in (inner, outer):
            return inner
        if accepts(mid):
            inner = mid
        else:
            outer = mid


def interval(task: Task) -> tuple[float, float] | None:
    """The numbers `task` accepts, as [lo, hi], found with its checker; None if it refuses its own truth."""
    truth = float(task.answer)
    accepts = lambda x: check_answer(task, x).correct  # noqa: E731
    if not accepts(truth):
        return None
    return _edge(accepts, truth, -1.0), _edge(accepts, truth, 1.0)


def densest_points(weighted: Sequence[tuple[tuple[float, float], int]], k: int = SWEEP_POINTS) -> list[float]:
    """Points inside intervals of the largest total weight, best first: the start of each of the `k` segments
    covered most. The ends are accepted numbers themselves, so a start lies inside every interval covering it
    (closed intervals: at equal positions starts sort before ends)."""
    events = sorted([(lo, 0, n) for (lo, _), n in weighted] + [(hi, 1, -n) for (_, hi), n in weighted])
    starts: list[tuple[int, float]] = []
    level = 0
    for x, is_end, delta in events:
        level += delta
        if not is_end and math.isfinite(x):
            starts.append((level, x))
    starts.sort(key=lambda s: -s[0])
    return [x for _, x in starts[:k]]


def candidates(gs: Sequence[Group]) -> list[Any]:
    """Constants worth scoring for one category (see the module docstring)."""
    if all(t.answer_spec.type == AnswerType.NUMERIC and _is_number(t.answer) for t, _ in gs):
        weighted = [(iv, n) for t, n in gs if (iv := interval(t)) is not None]
        median = statistics.median(float(t.answer) for t, n in gs for _ in range(n))
        found = [*densest_points(weighted), median, *(t.answer for t, _ in gs[:TOP_TRUTHS])]
    else:
        found = [t.answer for t, _ in gs[:MAX_CANDIDATES]]
    seen: set[str] = set()
    unique = []
    for c in found:
        if (key := answer_key(c)) not in seen:
            seen.add(key)
            unique.append(c)
    return unique


def category_spread(category: str, tasks: Sequence[Task]) -> Spread:
    keys = [answer_key(t.answer) for t in tasks]
    distinct = len(set(keys))
    best, best_count = None, 0
    # a program is checked by running tests, not against a constant: code tasks count as refusing every constant
    gs = groups([t for t in tasks if t.answer_spec.type != AnswerType.CODE])
    if gs:
        for c in candidates(gs):
            count = accepted_by(gs, c)
            if count > best_count or best is None:
                best, best_count = c, count
    return Spread(category=category, tasks=len(tasks), distinct=distinct, entropy_bits=round(entropy_bits(keys), 3),
                  best_constant=best, best_share=best_count / len(tasks) if tasks else 0.0,
                  bound=spread_bound(distinct))


def suite_spread(tasks: Iterable[Task]) -> list[Spread]:
    """One `Spread` per category, in category order."""
    by: dict[str, list[Task]] = {}
    for t in tasks:
        by.setdefault(t.category, []).append(t)
    return [category_spread(cat, group) for cat, group in sorted(by.items())]
