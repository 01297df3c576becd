"""The checker's reason states the true answer ('1 outside [27.4474, 30.3366]'): it, the truth and an imported task's
release answer stay out of everything a policy sees or is trained on (issue 8 §6). Only `Check.grader_reason`
holds the reason."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from components.envs.actions import SubmitAnswer
from components.envs.coding_env import CodingEnv, EnvConfig, StepResult
from components.envs.episode import Episode, load_episodes, save_episodes
from components.sandbox.protocol import Limits
from components.sandbox.warm import sandbox_supply
from components.tasks.generators import GenContext, all_generators
from components.tasks.importers.medagentgym import import_release
from components.tasks.record import AnswerType, Task, load_tasks
from tests.envs.conftest import process_backend_unavailable

SUBMIT_OBSERVATIONS = re.compile(r"Answer submitted: (correct|incorrect( \([a-z ]+\))?)\. The episode is over\.")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


@pytest.fixture(autouse=True)
def _needs_process_backend() -> None:
    reason = process_backend_unavailable()
    if reason:
        pytest.skip(reason)


def wrong_answer(truth: Any) -> Any:
    """An answer of the truth's own form that is not the truth, so the checker compares (and explains) it."""
    if isinstance(truth, bool):
        return not truth
    if isinstance(truth, int):
        return truth + 7
    if isinstance(truth, float):
        return round((truth + 0.5) % 1, 6) if 0 <= truth <= 1 else round(truth * 1.5 + 10, 4)
    if isinstance(truth, str):
        if "weeks" in truth:
            return "(3 weeks, 1 days)"
        try:
            return wrong_answer(float(truth))
        except ValueError:
            return "zzqx"
    if isinstance(truth, list | tuple):
        return ["zzqx"]
    return "zzqx"


def secrets_of(task: Task, reason: str) -> set[str]:
    """Strings that only the grader should hold: the truth's forms, its parts, the reason, the numbers in it."""
    found = {reason, str(task.answer), json.dumps(task.answer)}
    if isinstance(task.answer, list | tuple):
        found |= {str(x) for x in task.answer}
    if isinstance(task.answer, float):
        found |= {f"{task.answer:g}", f"{task.answer:.4f}", repr(task.answer)}
    found |= set(_NUMBER.findall(reason))
    release = task.metadata.get("release_answer")
    if isinstance(release, list):
        found |= {str(x) for x in release} | {json.dumps(release)}
    return found


def baseline(task: Task, submitted: Any, env: CodingEnv) -> str:
    """Text that may hold a secret's string without a leak: what the task states, the agent's own answer."""
    return "\n".join([task.prompt, json.dumps(submitted), task.task_id, json.dumps(env.config.model_dump(mode="json"))])


def visible_texts(episode: Episode, step: StepResult) -> dict[str, str]:
    """Everything a policy sees or is trained on from this episode, and the record less its grader-only field."""
    record = episode.model_dump(mode="json")
    assert record["check"] is not None
    record["check"].pop("grader_reason")
    record.pop("duration_s")
    for turn in record["turns"]:
        turn.pop("duration_s")
    texts = {f"observation {i}": t.observation for i, t in enumerate(episode.turns)}
    texts |= {f"message {i}": m["content"] for i, m in enumerate(episode.messages())}
    texts["step info"] = json.dumps(step.info)
    texts["step observation"] = step.observation.model_dump_json()
    texts["record"] = json.dumps(record)
    return texts


def assert_no_leak(env: CodingEnv, task: Task) -> Episode:
    submitted = wrong_answer(task.answer)
    env.reset(task)
    step = env.step(SubmitAnswer(answer=submitted))
    ep = env.episode
    assert step.done and ep.check is not None
    if ep.check.correct:  # the wrong answer happened to be accepted: nothing was explained
        return ep
    assert SUBMIT_OBSERVATIONS.fullmatch(ep.turns[-1].observation), ep.turns[-1].observation
    allowed = baseline(task, submitted, env)
    secrets = {s for s in secrets_of(task, ep.check.grader_reason) if len(s) >= 4 and s not in allowed}
    for where, text in visible_texts(ep, step).items():
        for secret in secrets:
            assert secret not in text, (task.task_id, where, secret, ep.check.grader_reason)
    return ep


def test_a_wrong_answer_learns_nothing_of_the_truth_on_generated_tasks(tmp_path):
    tasks = [t for g in all_generators() for t in g.generate(GenContext(out_dir=tmp_path, seed=13, split="test"), 2)]
    tasks = [t for t in tasks if t.answer_spec.type != AnswerType.CODE]
    assert len({t.category for t in tasks}) >= 50
    explained = 0
    episodes = []
    with sandbox_supply("process", Limits(timeout_s=30)) as supply:
        env = CodingEnv(tmp_path, supply, EnvConfig(max_turns=2))
        try:
            for task in tasks:
                ep = assert_no_leak(env, task)
                explained += not ep.check.correct
                episodes.append(ep)
        finally:
            env.close()
    assert explained >= 0.95 * len(tasks)
    # the grader's reason survives a round trip of the record, in its own field only
    save_episodes(tmp_path / "episodes.jsonl", episodes)
    again = load_episodes(tmp_path / "episodes.jsonl")
    assert [e.check.grader_reason for e in again] == [e.check.grader_reason for e in episodes]


def test_an_imported_ehrsql_tasks_release_answer_stays_with_the_grader(sample_release, tmp_path):
    src = tmp_path / "src"
    for name in ("mimic_iii", "eicu", "treqs"):
        shutil.copytree(sample_release / name, src / name)
    out = tmp_path / "out"
    import_release(src, out)
    tasks = [t for t in load_tasks(out / "tasks.jsonl") if t.metadata.get("release_answer")]
    assert len({t.dataset for t in tasks}) == 3
    with sandbox_supply("process", Limits(timeout_s=30)) as supply:
        env = CodingEnv(Path(out), supply, EnvConfig(max_turns=2))
        try:
            for task in tasks[::3]:
                first = env.reset(task).text
                assert_no_leak(env, task)
                # the next round starts from the same prompt: nothing of this verdict is carried into it
                assert env.reset(task).text == first
        finally:
            env.close()


def test_a_schema_1_record_reads_its_reason_as_the_grader_reason():
    ep = Episode.model_validate({"episode_id": "t#0", "task_id": "t", "first_observation": "q",
                                 "check": {"correct": False, "reason": "1 outside [27.4474, 30.3366]"}})
    assert ep.check.grader_reason == "1 outside [27.4474, 30.3366]"
    assert "27.4474" not in json.dumps(ep.messages())
