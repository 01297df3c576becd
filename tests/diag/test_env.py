"""The diagnostic environment: reset, ordering exams (JSON, plain lines, DiagGym's phrasing), unknown exams,
parse errors, the per-turn exam cap, the turn limit, the diagnosis and the reward, and the Episode record."""

from __future__ import annotations

import json

import pytest

from components.diag.actions import ACTION_FORMAT, Diagnose, OrderExams
from components.diag.env import DIAG_SYSTEM_PROMPT, FINAL_OBSERVATION, DiagEnv, DiagEnvConfig
from components.diag.grading import RewardConfig
from components.diag.world import RecordedWorldModel
from components.envs.actions import SubmitAnswer
from components.envs.episode import DiagOutcome, Outcome, load_episodes, save_episodes
from components.envs.protocol import Env, Observation, StepResult
from tests.diag.conftest import oracle_episode


@pytest.fixture
def env(world) -> DiagEnv:
    return DiagEnv(world)


@pytest.fixture
def case(test_cases):
    return next(c for c in test_cases if c.icd10 == "K85.90")


def order(*names: str) -> str:
    return json.dumps({"type": "order_exams", "exams": list(names)})


def test_reset_gives_the_profile_and_the_action_format(env, case):
    obs = env.reset(case, sample_index=2)
    assert obs.text.startswith(case.profile) and ACTION_FORMAT in obs.text and "12 turns" in obs.text
    assert obs.turn == 0 and obs.turns_left == 12
    ep = env.episode
    assert (ep.episode_id, ep.task_id, ep.sample_index) == (f"{case.case_id}#2", case.case_id, 2)
    assert ep.dataset == "diag_synthetic" and ep.domain == "diagnosis" and ep.category == "abdominal_pain"
    assert ep.system_prompt == DIAG_SYSTEM_PROMPT and ep.env_config["max_turns"] == 12
    assert case.diagnosis.lower() not in obs.text.lower() and "pancreatitis" not in obs.text.lower()


@pytest.mark.parametrize("reply", [
    order("CBC", "lipase"),
    "Let me check.\n```json\n" + order("complete blood count", "Lipase") + "\n```",
    "Order: CBC, lipase",
    "**Exams:** CBC; Lipase.",
    "Current diagnosis: pancreatitis?\nBased on the patient's initial presentation, the following investigation(s) "
    "should be performed: [CBC, lipase]\nReason: epigastric pain",
])
def test_orders_are_read_from_json_and_plain_lines(env, case, reply):
    env.reset(case)
    res = env.step(reply)
    assert not res.done and res.reward == 0.0
    turn = env.episode.turns[0]
    assert turn.action is None and turn.parse_error is None and not env.episode.submitted
    assert turn.metadata["ordered"] == ["Complete blood count", "Lipase"]
    assert "Exam name:\nComplete blood count\nExam results:\nWhite blood cell count: Value:" in res.observation.text
    assert "Exam name:\nLipase\nExam results:\nValue:" in res.observation.text
    assert res.observation.text.endswith("[turn 1 of 12]") and res.observation.turns_left == 11
    assert [p.exam for p in env.history] == ["Complete blood count", "Lipase"]


def test_results_come_from_the_world_model_given_the_history(world, case):
    env = DiagEnv(world)
    env.reset(case)
    env.step(order("BMP"))
    env.step(order("lipase"))
    bmp = world.simulate(case, "Basic metabolic panel", [], seed=0)
    assert env.history[0].result == bmp
    assert env.history[1].result == world.simulate(case, "Lipase", env.history[:1], seed=0)


def test_each_sample_sees_its_own_draws_unless_configured_otherwise(world, case):
    def first_result(cfg, sample):
        env = DiagEnv(world, cfg)
        env.reset(case, sample)
        env.step(order("BMP"))
        return env.history[0].result

    assert first_result(DiagEnvConfig(), 0) != first_result(DiagEnvConfig(), 1)
    same = DiagEnvConfig(vary_world_by_sample=False)
    assert first_result(same, 0) == first_result(same, 1)


def test_an_unknown_exam_is_answered_and_orders_nothing(env, case):
    env.reset(case)
    res = env.step(order("lipaze", "CBC", "full body scan"))
    assert "'lipaze' is not an exam in this hospital's catalogue; nothing was ordered. Closest exam names: Lipase" \
        in res.observation.text
    assert "'full body scan' is not an exam" in res.observation.text
    turn = env.episode.turns[0]
    assert turn.metadata["ordered"] == ["Complete blood count"] and turn.metadata["unknown"] == ["lipaze", "full body scan"]
    assert env.episode.error_kinds == {"UnknownExam": 1}


def test_a_reply_without_an_action_costs_a_turn_and_repeats_the_format(env, case):
    env.reset(case)
    res = env.step("I think we should look at the pancreas.")
    turn = env.episode.turns[0]
    assert turn.parse_error and turn.error.kind == "ParseError" and ACTION_FORMAT in res.observation.text
    assert res.observation.turns_left == 11
    res = env.step('{"type": "diagnose", "diagnosis": ["pancreatitis", "cholecystitis"]}')
    assert "invalid action: field 'diagnose.diagnosis'" in env.episode.turns[1].parse_error and not res.done


def test_at_most_max_exams_per_turn_are_ordered(world, case):
    env = DiagEnv(world, DiagEnvConfig(max_exams_per_turn=2))
    env.reset(case)
    res = env.step(order("CBC", "BMP", "lipase", "LFTs"))
    assert env.episode.turns[0].metadata["ordered"] == ["Complete blood count", "Basic metabolic panel"]
    assert "Not ordered (at most 2 exams per turn): lipase, LFTs." in res.observation.text


def test_only_the_first_action_of_a_reply_is_taken(env, case):
    env.reset(case)
    res = env.step(order("lipase") + "\nFinal diagnosis: Acute pancreatitis")
    assert not res.done and "only the first was taken" in res.observation.text
    assert env.episode.turns[0].metadata["ignored_actions"] == 1


def test_the_turn_limit_ends_the_episode_without_a_diagnosis(env, case):
    env.reset(case)
    texts = []
    for i in range(12):
        res = env.step(order("Lipase" if i % 2 else "CBC"))
        texts.append(res.observation.text)
    assert "next turn is the last: give your final diagnosis" in texts[10]
    assert res.done and "Turn limit reached" in res.observation.text
    ep = env.episode
    assert ep.outcome == Outcome.NO_ANSWER and len(ep.turns) == 12 and not ep.submitted and ep.check is None
    parts = ep.diag.reward.model_dump()
    assert parts["accuracy"] == 0 and parts["turn_penalty"] == 0  # the turns cost only a right diagnosis
    assert ep.reward == pytest.approx(parts["exam_f1"]) and res.reward == ep.reward
    with pytest.raises(RuntimeError, match="is over"):
        env.step(order("CBC"))


def test_the_same_order_three_times_is_a_loop(env, case):
    env.reset(case)
    for _ in range(3):
        res = env.step(order("CBC"))
    assert env.episode.loop_detected and "the same exams were ordered 3 times" in res.observation.text
    env.step("Final diagnosis: small bowel obstruction")
    assert env.episode.outcome == Outcome.STUCK_LOOP


def test_a_correct_diagnosis_ends_the_episode_with_the_reward(world, case):
    cfg = DiagEnvConfig(reward=RewardConfig(w_acc=2.0, w_f1=1.0, w_turn=0.1))
    env = DiagEnv(world, cfg)
    env.reset(case)
    env.step(order("lipase", "CBC", "chest x-ray"))
    res = env.step("**Final diagnosis:** Acute pancreatitis.")
    ep = env.episode
    assert res.done and ep.outcome == Outcome.CORRECT and res.info["correct"]
    assert isinstance(ep.turns[-1].action, SubmitAnswer) and ep.submitted_answer == "Acute pancreatitis"
    assert res.observation.text == FINAL_OBSERVATION  # neither the verdict nor the truth is shown
    key = {env.catalogue.exams[k].credit for k in case.key_exams}
    hits = len({"Lipase", "Complete blood count", "Chest X-ray"} & key)
    precision, recall = hits / 3, hits / len(key)
    f1 = 2 * precision * recall / (precision + recall)
    assert ep.diag.exams.f1 == pytest.approx(f1)
    assert ep.reward == pytest.approx(2.0 + 1.0 * f1 - 0.1 * 2) and res.reward == ep.reward
    assert "Acute pancreatitis (K85.90)" in ep.check.grader_reason and "key exams: Lipase" in ep.check.grader_reason


def test_a_wrong_diagnosis_earns_only_its_exams(env, case):
    env.reset(case)
    env.step(Diagnose(diagnosis="Acute cholecystitis"))
    ep = env.episode
    assert ep.outcome == Outcome.WRONG_ANSWER and not ep.check.correct
    assert ep.diag.well_formed  # well formed, and paid nothing for it
    assert ep.reward == 0  # nothing ordered: F1 0, and no turn is charged to a wrong diagnosis


def test_the_episode_round_trips_and_renders_as_chat(env, case, tmp_path):
    env.reset(case)
    env.step(OrderExams(exams=["lipase"]))
    env.step("Final diagnosis: acute pancreatitis")
    ep = env.episode
    ep.turns[1].response_token_ids = [5, 6]
    path = tmp_path / "episodes.jsonl"
    save_episodes(path, [ep])
    (back,) = load_episodes(path)
    assert back == ep and back.diag.correct
    msgs = back.messages()
    assert msgs[0] == {"role": "system", "content": DIAG_SYSTEM_PROMPT} and msgs[1]["content"] == ep.first_observation
    assert msgs[2]["content"] == '{"type":"order_exams","exams":["lipase"]}'  # an object action, rendered
    assert back.turns[0].metadata["rendered_action"] and "rendered_action" not in back.turns[1].metadata
    assert msgs[4]["content"] == "Final diagnosis: acute pancreatitis" and len(msgs) == 2 + 2 * len(ep.turns)


def test_a_full_context_ends_the_episode(env, case):
    env.reset(case)
    env.step(order("CBC"))
    env.end_for_context("prompt 2100 + 512 new > 2048")
    assert env.episode.outcome == Outcome.CONTEXT_LIMIT and env.episode.truncation.startswith("prompt")


def test_the_oracle_reaches_the_top_reward(test_cases):
    env = DiagEnv(RecordedWorldModel())
    ep = oracle_episode(env, test_cases[0])
    assert ep.outcome == Outcome.CORRECT and ep.diag.exams.f1 == 1.0
    assert ep.reward == pytest.approx(1.0 + 0.5 - 0.02 * len(ep.turns))


def test_the_outcome_is_a_typed_part_of_the_episode(env, case, tmp_path):
    env.reset(case)
    env.step(order("lipase", "CBC"))
    env.step("Final diagnosis: acute pancreatitis")
    ep = env.episode
    assert isinstance(ep.diag, DiagOutcome) and "diag" not in ep.metadata
    assert (ep.diag.diagnosis, ep.diag.correct, ep.diag.turns, ep.diag.well_formed) == ("acute pancreatitis", True, 2, True)
    assert ep.diag.exams.ordered == 2 and ep.diag.exams.hits >= 1 and ep.diag.reward.total == ep.reward
    assert ep.model_dump(mode="json")["diag"]["exams"]["precision"] == ep.diag.exams.precision
    # a record written before the field (schema 3) kept the outcome in metadata["diag"]: it reads as the field
    old = ep.model_dump(mode="json") | {"schema_version": 3, "diag": None}
    old["metadata"] = {**old["metadata"], "diag": ep.diag.model_dump(mode="json")}
    (tmp_path / "old.jsonl").write_text(json.dumps(old) + "\n")
    (back,) = load_episodes(tmp_path / "old.jsonl")
    assert back.diag == ep.diag and "diag" not in back.metadata and old["metadata"]["diag"]  # the row itself untouched
    # an episode ended for its context is scored too: no diagnosis, not correct
    env.reset(case)
    env.end_for_context("prompt 5000 + 512 new > 4096")
    assert env.episode.diag is not None and env.episode.diag.diagnosis is None and not env.episode.diag.correct


def test_both_environments_implement_the_one_protocol(env, case):
    obs = env.reset(case)
    result = env.step(order("lipase"))
    assert isinstance(env, Env)
    assert type(obs) is Observation and type(result) is StepResult and result.observation.files == []
    assert not result.done and result.reward == 0.0 and result.observation.turns_left == 11
