"""Rewards that only solving earns: the best constant diagnosis stays within 1/min(n, 10) + 0.10; ordering every
exam in the catalogue earns less than a clinician's short list; a list of candidate diagnoses earns nothing; no
constant strategy earns what the greedy oracle earns, and stopping with a wrong diagnosis earns nothing over never
diagnosing; and the scripted oracle (key exams, then the right diagnosis) reaches a high reward."""

from __future__ import annotations

import json
import math

import pytest

from components.diag.baselines import GreedyOracleAgent, diagnose_text, most_common_diagnosis, order_text
from components.diag.catalogue import default_catalogue
from components.diag.env import DiagEnv, DiagEnvConfig
from components.diag.evaluate import DiagView, run_agent
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
    assert len(env.episode.diag.exams_ordered) >= min(len(ALL_EXAMS), per_turn * (turns - 1)) * 0.3
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


ROUTINE = ["Complete blood count", "Basic metabolic panel", "Chest X-ray", "Urinalysis"]
NOT_IN_THE_COHORT = "Viral syndrome"  # a short, well-formed diagnosis no case has


class Constant:
    """An agent whose replies depend only on how many it has sent (and the turn budget), never on the patient."""

    def __init__(self, name: str, reply) -> None:  # noqa: ANN001
        self.name, self.reply = name, reply

    def act(self, view: DiagView) -> str:
        return self.reply(len(view.replies))


def constant_strategies(common: str, turns: int) -> list[Constant]:
    def every_exam(i: int) -> str:
        chunk = ALL_EXAMS[4 * i:4 * i + 4]
        return order_text(chunk) if chunk and i < turns - 1 else diagnose_text(common)

    return [
        Constant("stop at turn 1, wrong", lambda i: diagnose_text(NOT_IN_THE_COHORT)),
        Constant("stop at turn 1, the commonest disease", lambda i: diagnose_text(common)),
        Constant("never diagnose, no action", lambda i: "Let me think about this."),
        Constant("never diagnose, routine exams", lambda i: order_text([ROUTINE[i % len(ROUTINE)]])),
        Constant("routine exams, then wrong", lambda i: diagnose_text(NOT_IN_THE_COHORT) if i else order_text(ROUTINE)),
        Constant("routine exams, then nothing", lambda i: "Let me think about this." if i else order_text(ROUTINE)),
        Constant("every exam, then the commonest disease", every_exam),
    ]


@pytest.mark.parametrize("turns", [6, 12])  # the diag-demo's limit and DiagGym's
def test_no_constant_strategy_earns_what_the_greedy_oracle_earns_nor_gains_by_stopping(world, train, test_cases, turns):
    config, cases = DiagEnvConfig(max_turns=turns), test_cases[:60]

    def mean_reward(agent) -> float:  # noqa: ANN001
        episodes = run_agent(agent, cases, world, config)
        return sum(e.reward for e in episodes) / len(episodes)

    greedy = mean_reward(GreedyOracleAgent.fit(train, world))
    earned = {a.name: mean_reward(a) for a in constant_strategies(most_common_diagnosis(train), turns)}
    assert greedy > 0.7
    for name, value in earned.items():
        assert value < greedy - 0.5, (name, value, greedy)
    # a wrong diagnosis buys nothing over none: neither at turn 1 nor after the same exams
    assert earned["stop at turn 1, wrong"] <= earned["never diagnose, no action"], earned
    assert earned["routine exams, then wrong"] <= earned["routine exams, then nothing"], earned


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
    parts = ep.diag.reward.model_dump()
    assert ep.outcome == Outcome.WRONG_ANSWER and not ep.check.correct
    assert parts["accuracy"] == 0 and parts["turn_penalty"] == 0
    # exactly what the same exams and no diagnosis at all earn
    assert ep.reward == pytest.approx(parts["exam_f1"])


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
