"""The Episode record: outcome precedence and a lossless JSON-lines round trip."""

from __future__ import annotations

import json

import pytest

from components.common.io import RecordError
from components.envs.actions import InspectData, RunCode, SubmitAnswer
from components.envs.episode import Check, Episode, Outcome, classify_outcome, load_episodes, save_episodes
from tests.envs.conftest import make_task


@pytest.mark.parametrize(
    ("submitted", "correct", "loop", "want"),
    [
        (True, True, True, Outcome.CORRECT),
        (True, True, False, Outcome.CORRECT),
        (True, False, True, Outcome.STUCK_LOOP),
        (False, None, True, Outcome.STUCK_LOOP),
        (True, False, False, Outcome.WRONG_ANSWER),
        (False, None, False, Outcome.NO_ANSWER),
    ],
)
def test_outcome_precedence(submitted, correct, loop, want):
    check = None if correct is None else Check(correct=correct, grader_reason="r")
    assert classify_outcome(submitted, check, loop) == want


def test_real_episode_round_trips_through_jsonl(make_env, tmp_path):
    env = make_env(max_turns=5)
    task = make_task()
    env.reset(task)
    env.step(InspectData(path="data/pharmacy.db", column="drug", value="aspirin"))
    env.step("```python\nimport pandas as pd\nprint(pd.read_csv('data/patients.csv')['Sex'])\n```")
    env.step(RunCode(code="print(49)"))
    env.step(SubmitAnswer(answer={"mean": 49}))
    ep = env.episode
    ep.turns[2].response_token_ids = [1, 2, 3]  # training stages fill these in later
    ep.turns[2].loss_mask = [1, 1, 0]
    path = tmp_path / "episodes.jsonl"
    assert save_episodes(path, [ep]) == 1
    (back,) = load_episodes(path)
    assert back == ep
    assert back.turns[1].error.kind == "KeyError" and back.turns[1].exec_result.status == "error"
    assert back.error_kinds == {"KeyError": 1} and back.outcome == Outcome.WRONG_ANSWER
    assert isinstance(back.turns[0].action, InspectData) and back.turns[1].raw_text.startswith("```python")
    msgs = back.messages()
    assert msgs[1]["content"] == ep.first_observation and len(msgs) == 2 + 2 * len(ep.turns)
    assert json.loads(path.read_text())["turns"][3]["action"] == {"type": "submit_answer", "answer": {"mean": 49}}


def test_bad_episode_line_names_file_line_and_field(tmp_path):
    path = tmp_path / "episodes.jsonl"
    good = Episode(episode_id="t#0", task_id="t", first_observation="p")
    path.write_text(good.model_dump_json() + "\n" + json.dumps({"episode_id": "x", "task_id": "x"}) + "\n")
    with pytest.raises(RecordError, match=r"line 2, field 'first_observation'"):
        load_episodes(path)
