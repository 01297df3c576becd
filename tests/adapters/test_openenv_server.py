"""`medgym env serve` is an OpenEnv environment server: OpenEnv's own clients play MedGym episodes on it over loopback,
the sandbox and the checker running on the server."""

from __future__ import annotations

import requests
from openenv.core.generic_client import GenericEnvClient

from components.adapters.openenv_client import MedGymEnvClient
from components.adapters.openenv_models import MedGymAction
from tests.adapters.conftest import FEMALE_MEAN_AGE, secrets


def test_the_typed_client_plays_an_episode_to_the_checkers_reward(server):
    with MedGymEnvClient(base_url=server).sync() as env:
        first = env.reset(task_id="age")
        assert not first.done and first.observation.task_id == "age" and first.observation.turns_left == 4
        assert "mean age of the female patients" in first.observation.text
        assert first.observation.files == ["data/patients.csv", "data/pharmacy.db", "data/seqs.fasta"]
        ran = env.step(MedGymAction(type="run_code", code=(
            "import pandas as pd\nd = pd.read_csv('data/patients.csv')\nprint(d[d.sex == 'F'].age.mean())")))
        assert "49.1666" in ran.observation.text and ran.reward == 0.0 and not ran.done  # printing earns nothing
        assert "sodium" in env.step(MedGymAction(type="inspect_data", path="data/patients.csv")).observation.text
        done = env.step(MedGymAction(type="submit_answer", answer=round(FEMALE_MEAN_AGE, 3)))
        assert done.done and done.reward == 1.0 and done.observation.text.startswith("Answer submitted: correct")
        state = env.state()
        assert state.step_count == 3 and state.task_id == "age"


def test_openenvs_generic_client_plays_an_episode_and_a_wrong_answer_scores_zero(server):
    with GenericEnvClient(base_url=server).sync() as env:
        first = env.reset(seed=1)  # the second task of the file
        assert first.observation["task_id"] == "sodium"
        done = env.step({"type": "submit_answer", "answer": f"{FEMALE_MEAN_AGE:.3f}"})
        assert done.done and done.reward == 0.0
        assert done.observation["text"] == "Answer submitted: incorrect. The episode is over."
        again = env.reset(task_id="sodium")  # a new episode on the same session
        assert not again.done and again.observation["turn"] == 0
    assert all(s not in str(done) + str(first) for s in secrets())


def test_the_server_describes_itself_the_openenv_way(server):
    schema = requests.get(f"{server}/schema", timeout=10).json()
    assert schema["action"]["properties"]["type"]["enum"] == ["run_code", "inspect_data", "submit_answer"]
    assert {"text", "turn", "turns_left", "files"} <= set(schema["observation"]["properties"])
    assert requests.get(f"{server}/metadata", timeout=10).json()["name"] == "medgym-coding"
    # HTTP reset is OpenEnv's stateless one: an episode started and ended within the request
    reset = requests.post(f"{server}/reset", json={"task_id": "age"}, timeout=60).json()
    assert "female patients" in reset["observation"]["text"] and reset["done"] is False
