"""Pick tasks so that their answers are spread out: no constant answer may earn much (see components.tasks.spread).

Generators that find their questions in data (an EHR database, a generated table) cannot choose the answers, and
the answers of such questions pile up on a few values. `balanced` takes candidates with their answers and picks
round by round one candidate per distinct answer, so every answer is used about as often as the others until
the rarer ones run out.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def answer_key(value: Any) -> str:
    """One string per answer value, so that equal answers count once (sorted keys: dicts compare by value)."""
    return json.dumps(value, sort_keys=True, default=str)


def balanced(items: Sequence[T], n: int, rng: random.Random, key: Callable[[T], Hashable]) -> list[T]:
    """`n` of `items` (all of them if fewer), in random order, taken one per distinct key per round.

    Within a key, items keep their order (the caller shuffled them already); which keys fill the last, partial
    round is drawn at random, so no answer is favoured by where it first appeared.
    """
    buckets: dict[Hashable, list[T]] = {}
    for item in items:
        buckets.setdefault(key(item), []).append(item)
    queues = [list(reversed(b)) for b in buckets.values()]  # pop() from the end takes the first item
    chosen: list[T] = []
    while queues and len(chosen) < n:
        rng.shuffle(queues)
        for q in queues:
            if len(chosen) >= n:
                break
            chosen.append(q.pop())
        queues = [q for q in queues if q]
    rng.shuffle(chosen)
    return chosen
