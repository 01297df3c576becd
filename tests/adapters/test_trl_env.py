"""The TRL environment class on the real process sandbox and checker: its tools, its reward, what it shows."""

from __future__ import annotations

import inspect

import pytest
from transformers.utils import get_json_schema

from components.adapters.session import ClientError
from components.adapters.trl_env import MedGymToolEnv, trl_dataset, trl_environment_factory
from tests.adapters.conftest import FEMALE_MEAN_AGE, MEAN_SODIUM, secrets


def test_tools_are_exactly_the_three_actions_with_schemas(settings):
    """TRL offers every public method but reset/get_reward as a tool: a fourth (say `close`) would reach the model."""
    public = {n for n, _ in inspect.getmembers(MedGymToolEnv, predicate=inspect.isfunction) if not n.startswith("_")}
    assert public - {"reset", "get_reward"} == {"run_code", "inspect_data", "submit_answer"}
    env = trl_environment_factory(settings)()
    schemas = {s["function"]["name"]: s["function"] for s in map(get_json_schema, (env.run_code, env.inspect_data,
                                                                                   env.submit_answer))}
    assert schemas["run_code"]["parameters"]["required"] == ["code"]
    assert schemas["inspect_data"]["parameters"]["required"] == ["path"]
    assert set(schemas["inspect_data"]["parameters"]["properties"]) == {"path", "column", "value"}
    assert schemas["submit_answer"]["parameters"]["properties"]["answer"]["type"] == "string"


def test_an_episode_through_the_tools_is_scored_by_the_checker(settings):
    episodes = []
    env = trl_environment_factory(settings, episode_sink=episodes.append)()
    first = env.reset(task_id="age")
    assert "mean age of the female patients" in first and "data/patients.csv" in first
    out = env.run_code("import pandas as pd\nd = pd.read_csv('data/patients.csv')\nprint(d[d.sex == 'F'].age.mean())")
    assert "49.1666" in out  # the sandbox ran it on the task's file
    assert env.get_reward() == 0.0, "printing the answer earns nothing"
    assert "sex" in env.inspect_data("data/patients.csv")
    assert env.submit_answer(f"{FEMALE_MEAN_AGE:.3f}").startswith("Answer submitted: correct")
    assert env.get_reward() == 1.0
    with pytest.raises(ClientError, match="episode is over"):
        env.run_code("print(1)")
    env.reset(task_id="sodium")
    out = env.submit_answer(f"{FEMALE_MEAN_AGE:.3f}")  # the other task's truth
    assert out.startswith("Answer submitted: incorrect") and env.get_reward() == 0.0
    env.get_reward()  # once per rollout in the sink, however often TRL asks
    assert [(e.task_id, e.check.correct) for e in episodes] == [("age", True), ("sodium", False)]
    assert all(s not in out for s in secrets()), "the wrong answer's reply names the truth"


def test_a_rollout_that_never_submits_scores_zero_and_reset_without_id_deals_in_turn(settings):
    env = trl_environment_factory(settings)()
    assert "female patients" in env.reset()
    env.run_code(f"print({MEAN_SODIUM})")
    assert env.get_reward() == 0.0
    assert "sodium" in env.reset(prompt=[{"role": "user", "content": ""}], answer=123)  # extra columns ignored


def test_bad_tool_calls_get_fixed_refusals(settings):
    env = trl_environment_factory(settings)()
    with pytest.raises(ClientError, match="reset first"):
        env.run_code("print(1)")
    env.reset(task_id="age")
    with pytest.raises(ClientError, match="field 'code'"):
        env.run_code("")
    with pytest.raises(ClientError, match="at most"):
        env.run_code("x = 1\n" * 100_000)
    with pytest.raises(ClientError, match="no served task"):
        env.reset(task_id="../../etc/passwd")


def test_dataset_rows_hold_no_answer(settings):
    ds = trl_dataset(settings, repeat=2)
    assert ds.column_names == ["prompt", "task_id"] and ds["task_id"] == ["age", "sodium"] * 2
    text = str(ds.to_list())
    assert all(s not in text for s in secrets())
