"""A small generated cohort, its train split and a world model: the case's own results, the statistical model
fit on the train split where a result was not recorded."""

from __future__ import annotations

import pytest

from components.diag.cohort import CohortConfig, build_cohort
from components.diag.record import Case
from components.diag.world import RecordedWorldModel, StatisticalWorldModel


def spans(mask: list[int], value: int) -> list[tuple[int, int]]:
    """The [start, end) runs of `value` in a 0/1 mask."""
    out, start = [], None
    for i, m in enumerate([*mask, 1 - value]):
        if m == value and start is None:
            start = i
        elif m != value and start is not None:
            out.append((start, i))
            start = None
    return out


@pytest.fixture(scope="session")
def rl_train() -> list[Case]:
    return [c for c in build_cohort(CohortConfig(patients=40, seed=3)) if c.split == "train"]


@pytest.fixture(scope="session")
def rl_world(rl_train) -> RecordedWorldModel:
    return RecordedWorldModel(fallback=StatisticalWorldModel.fit(rl_train, seed=0))


@pytest.fixture(scope="session")
def chat():
    from components.policies.tokens import ChatTokens
    from components.training.models import load_tokenizer

    return ChatTokens(load_tokenizer("SmolLM2-135M-Instruct"))
