"""questions_per_file: distinct prompts, at most per_file per file, a new file when one's questions run out."""

from __future__ import annotations

import random

import pytest

from components.tasks.generators.filetasks import Question, questions_per_file
from components.tasks.record import AnswerSpec, AnswerType

SPEC = AnswerSpec(type=AnswerType.INTEGER)


def _ask(rng: random.Random, space: int):
    def ask(group: int) -> Question:
        k = rng.randrange(space)
        return Question(f"file {group} question {k}", int, (k,), SPEC)
    return ask


def test_small_question_space_spreads_over_more_files():
    got = list(questions_per_file(20, 10, lambda g: g, _ask(random.Random(1), 3), lambda g, q: q.args[0]))
    prompts = [q.prompt for _, q, _ in got]
    assert len(got) == 20 and len(set(prompts)) == 20
    per_file = [sum(1 for g, _, _ in got if g == group) for group in range(7)]
    assert per_file == [3, 3, 3, 3, 3, 3, 2]  # each file gives all 3 of its questions, never 10


def test_per_file_caps_a_large_space_and_unanswerable_draws_are_skipped():
    got = list(questions_per_file(12, 5, lambda g: g, _ask(random.Random(2), 100),
                                  lambda g, q: None if q.args[0] % 2 else q.args[0]))
    assert [g for g, _, _ in got] == [0] * 5 + [1] * 5 + [2] * 2
    assert all(a % 2 == 0 and a == q.args[0] for _, q, a in got)


def test_a_file_without_any_answerable_question_is_an_error():
    with pytest.raises(RuntimeError, match="context file 0"):
        list(questions_per_file(3, 2, lambda g: g, _ask(random.Random(3), 4), lambda g, q: None))
