"""Rewards that only solving earns: the best constant diagnosis stays within 1/min(n, 10) + 0.10; ordering every
exam in the catalogue earns less than a clinician's short list; a list of candidate diagnoses earns nothing; and the
scripted oracle (key exams, then the right diagnosis) reaches a high reward."""

from __future__ import annotations

import json
import math

import pytest

from components.diag.catalogue import default_catalogue
from components.diag.env import DiagEnv, DiagEnvConfig
from components.diag.grading import RewardConfig, grade_diagnosis
from components.diag.metrics import summarize_episodes
from components.diag.world import RecordedWorldModel
from components.envs.episode import Outcome
from components.tasks.spread import spread_bound
from tests.diag.conftest import oracle_episode

CAT = default_catalogue()
ALL_EXAMS = list(CAT.exams)


def test_the_best_constant_diagnosis_is_within_the_bound(world, test_cases):
    env = DiagEnv(world)
    candidates = sorted({c.diagnosis for c in test_cases} | {d.name for d in CAT.diseases.values()})
    best = 0.0
    for answer in candidates:
        correct = 0
        for case in test_cases:
            env.reset(case)
            env.step(json.dumps({"type": "diagnose", "diagnosis": answer}))
            correct += env.episode.outcome == Outcome.CORRECT
        best = max(best, correct / len(test_cases))
    distinct = len({c.icd10 for c in test_cases})
    assert len(test_cases) >= 100 and distinct >= 30
    assert best <= spread_bound(distinct)
    assert best < 0.1


def _order_everything(env, case, diagnose: bool) -> float:
    """Every exam in the catalogue, as many per turn as allowed; then, while turns remain, the first exam again;
    the last turn kept for the right diagnosis when `diagnose`."""
    env.reset(case)
    per_turn, turns = env.config.max_exams_per_turn, env.config.max_turns
    i = 0
    while not env.episode.done:
        if diagnose and len(env.episode.turns) == turns - 1:
            env.step(f"Final diagnosis: {case.diagnosis}")
            break
        chunk = ALL_EXAMS[i:i + per_turn] or ALL_EXAMS[:1]
        env.step(json.dumps({"type": "order_exams", "exams": chunk}))
        i += per_turn
    assert len(env.episode.metadata["diag"]["exams_ordered"]) >= min(len(ALL_EXAMS), per_turn * (turns - 1)) * 0.3
    return env.episode.reward


@pytest.mark.parametrize("config", [
    DiagEnvConfig(),  # 4 exams a turn: the catalogue takes 28 turns
    DiagEnvConfig(max_exams_per_turn=len(ALL_EXAMS)),  # everything in one turn: precision alone
    DiagEnvConfig(max_exams_per_turn=len(ALL_EXAMS), reward=RewardConfig(w_turn=0.0)),  # turns free
], ids=["default", "all-in-one-turn", "all-in-one-turn-no-turn-cost"])
def test_ordering_every_exam_earns_less_than_the_clinicians_short_list(world, test_cases, config):
    env = DiagEnv(world, config)
    for case in test_cases[:12]:
        short = oracle_episode(env, case).reward
        assert _order_everything(env, case, diagnose=True) < short
        assert _order_everything(env, case, diagnose=False) < short
    env.reset(test_cases[0])
    env.step(json.dumps({"type": "order_exams", "exams": ALL_EXAMS}))
    assert env.episode.turns[0].metadata["ordered"]  # the whole catalogue can be ordered where allowed


LISTS = [
    "{true}, sepsis, pulmonary embolism",
    "sepsis; {true}",
    "{true} or sepsis",
    "{true} / pneumonia",
    "{true} and community-acquired pneumonia",
    "1. {true} 2. sepsis",
    "DDx: {true}, sepsis, MI",
    "{true} vs sepsis",
]


@pytest.mark.parametrize("template", LISTS)
def test_a_list_of_candidates_earns_nothing(world, test_cases, template):
    env = DiagEnv(world)
    case = next(c for c in test_cases if c.icd10 == "K85.90")
    env.reset(case)
    env.step(json.dumps({"type": "order_exams", "exams": case.key_exams}))
    env.step(json.dumps({"type": "diagnose", "diagnosis": template.format(true=case.diagnosis)}))
    ep = env.episode
    parts = ep.metadata["diag"]["reward"]
    assert ep.outcome == Outcome.WRONG_ANSWER and not ep.check.correct
    assert parts["accuracy"] == 0 and parts["format_bonus"] == 0
    # exactly what the same exams and no diagnosis at all would earn
    assert ep.reward == pytest.approx(parts["exam_f1"] + parts["turn_penalty"])


def test_every_disease_is_recognized_by_name_synonym_and_code_alone(test_cases):
    for disease in CAT.diseases.values():
        case = next((c for c in test_cases if c.icd10 == disease.code), None)
        if case is None:
            continue
        for answer in (disease.name, *disease.synonyms, disease.code, f"{disease.name} ({disease.code})"):
            assert grade_diagnosis(answer, case, CAT).correct, answer
        others = [d for d in CAT.diseases.values() if d.code != disease.code]
        assert not any(grade_diagnosis(o.name, case, CAT).correct for o in others)
        assert not grade_diagnosis(f"{disease.name} ({others[0].code})", case, CAT).correct  # name and code disagree


@pytest.mark.parametrize("world_kind", ["recorded", "statistical"])
def test_the_scripted_oracle_reaches_a_high_reward(world, test_cases, world_kind):
    env = DiagEnv(RecordedWorldModel() if world_kind == "recorded" else world)
    episodes = [oracle_episode(env, case) for case in test_cases]
    summary = summarize_episodes(episodes)
    assert summary.accuracy == 1.0 and summary.f1_mean == 1.0 and summary.precision == 1.0
    mean_reward = sum(e.reward for e in episodes) / len(episodes)
    assert mean_reward > 1.45
    assert all(e.outcome == Outcome.CORRECT for e in episodes)
    assert summary.avg_turns == pytest.approx(sum(1 + math.ceil(len(c.key_exams) / 4) for c in test_cases)
                                              / len(test_cases))
