"""Exam precision/recall/F1 (both of DiagGym's F1s), accuracy and turns, from scores and from episodes."""

from __future__ import annotations

import json

import pytest

from components.diag.env import DiagEnv
from components.diag.metrics import CaseOutcome, exam_scores, outcome_of, summarize, summarize_episodes
from components.diag.world import RecordedWorldModel
from components.envs.episode import Episode


def test_exam_scores():
    s = exam_scores(["a", "b", "c", "a"], ["a", "d"])
    assert (s.precision, s.recall, s.hits, s.ordered, s.key) == (pytest.approx(1 / 3), 0.5, 1, 3, 2)
    assert s.f1 == pytest.approx(0.4)
    assert exam_scores([], ["a"]).model_dump() == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "ordered": 0,
                                                   "key": 1, "hits": 0}
    assert exam_scores([], []).f1 == 1.0 and exam_scores(["a"], []).precision == 0.0


def test_mean_of_f1_and_f1_of_means_differ_as_diaggym_reports_both():
    a = CaseOutcome(case_id="a", correct=True, turns=2, exams=exam_scores(["k1"], ["k1", "k2"]))  # P 1, R .5
    b = CaseOutcome(case_id="b", correct=False, turns=4, exams=exam_scores(["k1", "x1", "x2", "x3", "x4"], ["k1"]))
    s = summarize([a, b])
    assert (s.n, s.accuracy, s.avg_turns) == (2, 0.5, 3.0)
    assert s.precision == pytest.approx(0.6) and s.recall == pytest.approx(0.75)
    assert s.f1_mean == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert s.f1_of_means == pytest.approx(2 * 0.6 * 0.75 / 1.35)
    assert summarize([]).n == 0


def test_summary_from_episodes(test_cases):
    env = DiagEnv(RecordedWorldModel())
    episodes = []
    for case in test_cases[:5]:
        env.reset(case)
        env.step('{"type": "order_exams", "exams": ["CBC"]}')
        env.step(f"Final diagnosis: {case.diagnosis}")
        episodes.append(env.episode)
    s = summarize_episodes(episodes)
    assert s.accuracy == 1.0 and s.avg_turns == 2.0
    assert s.precision == pytest.approx(sum("Complete blood count" in c.key_exams for c in test_cases[:5]) / 5)
    assert outcome_of(episodes[0]).case_id == test_cases[0].case_id
    with pytest.raises(ValueError, match="not a finished diagnostic episode"):
        outcome_of(Episode(episode_id="x#0", task_id="x", first_observation="p"))


def test_a_registration_pairs_agents_per_case_on_accuracy_or_exam_f1(test_cases):
    from flows.diag_pipeline import case_scores

    env = DiagEnv(RecordedWorldModel())
    case = test_cases[0]
    episodes = []
    for i, diagnosis in enumerate([case.diagnosis, "not a disease"]):  # two samples of one case: right, then wrong
        env.reset(case, i)
        env.step(json.dumps({"type": "order_exams", "exams": case.key_exams[:1]}))
        env.step(f"Final diagnosis: {diagnosis}")
        episodes.append(env.episode)
    f1 = exam_scores(case.key_exams[:1], case.key_exams).f1
    assert 0 < f1 < 1
    assert case_scores(episodes, "accuracy") == {case.case_id: 0.5}
    assert case_scores(episodes, "exam_f1") == {case.case_id: pytest.approx(f1)}
    with pytest.raises(ValueError, match="no per-case figure"):
        case_scores(episodes, "f1")
