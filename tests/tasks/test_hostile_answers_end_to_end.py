"""Issue 23, section 5, end to end: a 400-digit integer submitted to the coding environment ends the episode with
a wrong verdict, and `medgym tasks score` gives every line its verdict, whatever one line does to its checker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from components.envs.coding_env import CodingEnv, EnvConfig, make_sandbox_factory
from components.envs.episode import Outcome
from components.tasks.record import AnswerSpec, AnswerType, ContextFile, Domain, Task, save_tasks
from tests.envs.conftest import make_task, process_backend_unavailable, write_task_folder

MEDGYM = [sys.executable, "-c", "from flows.cli import main; main()"]
HUGE = "9" * 400  # as the agent writes it in its JSON action


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory):
    if reason := process_backend_unavailable():
        pytest.skip(reason)
    config = EnvConfig(exec_timeout_s=10.0, max_turns=3)
    coding_env = CodingEnv(write_task_folder(tmp_path_factory.mktemp("tasks")),
                           make_sandbox_factory(config, backend="process"), config)
    yield coding_env
    coding_env.close()


@pytest.mark.parametrize("answer_spec,truth", [
    (AnswerSpec(type=AnswerType.INTEGER), 7),
    (AnswerSpec(type=AnswerType.NUMERIC, abs_tol=1e-6), 54.0),
    (AnswerSpec(type=AnswerType.SET), ["iv", "po"]),
    (AnswerSpec(type=AnswerType.LIST), [1, 2]),
    (AnswerSpec(type=AnswerType.ROWS), [[1, "F"]]),
], ids=lambda v: getattr(v, "type", None) or "")
@pytest.mark.parametrize("answer", [HUGE, f"-{HUGE}", f"[{HUGE}]", f"[1, {HUGE}]"])
def test_a_400_digit_integer_ends_the_episode_with_a_wrong_verdict(env, answer_spec, truth, answer):
    env.reset(make_task(answer=truth, spec=answer_spec))
    result = env.step(f'```json\n{{"type": "submit_answer", "answer": {answer}}}\n```')
    assert result.done and result.reward == 0.0
    episode = env.episode
    assert episode.submitted and episode.outcome == Outcome.WRONG_ANSWER and episode.check.correct is False
    assert episode.check.grader_reason.startswith(("unparsable answer", "missing", "element", "expected")), episode.check


# ---- medgym tasks score --------------------------------------------------------------------------------------


def _task(i: int, answer, spec: AnswerSpec, files: list[ContextFile] | None = None) -> Task:
    return Task(task_id=f"cat/test/{i}", dataset="synthetic_ehr", category="cat", domain=Domain.EHR, split="test",
                prompt=f"Question number {i}: what is the value?", answer=answer, answer_spec=spec,
                context_files=files or [])


def _score(tmp_path: Path, tasks: list[Task], answers: list[str]) -> tuple[subprocess.CompletedProcess, Path]:
    save_tasks(tmp_path / "tasks.jsonl", tasks)
    (tmp_path / "answers.jsonl").write_text("\n".join(answers) + "\n")
    out = tmp_path / "scores.jsonl"
    proc = subprocess.run([*MEDGYM, "tasks", "score", "--tasks", str(tmp_path / "tasks.jsonl"), "--answers",
                           str(tmp_path / "answers.jsonl"), "--out", str(out), "--backend", "process"],
                          capture_output=True, text=True, timeout=180)
    return proc, out


def _verdicts(out: Path) -> tuple[dict[str, dict], dict]:
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    return {v["task_id"]: v for v in lines[:-1]}, lines[-1]["summary"]


def test_score_gives_a_400_digit_integer_its_verdict_and_scores_the_rest(tmp_path):
    tasks = [_task(0, 7, AnswerSpec(type=AnswerType.INTEGER)),
             _task(1, 2.5, AnswerSpec(type=AnswerType.NUMERIC, rel_tol=0.01)),
             _task(2, ["0389", "4019"], AnswerSpec(type=AnswerType.SET)),
             _task(3, [1, 2], AnswerSpec(type=AnswerType.LIST)),
             _task(4, [[1, "iv"]], AnswerSpec(type=AnswerType.ROWS)),
             _task(5, 3, AnswerSpec(type=AnswerType.INTEGER))]
    answers = [f'{{"task_id": "cat/test/{i}", "answer": {a}}}'
               for i, a in enumerate([HUGE, f"-{HUGE}", f'["0389", {HUGE}]', f"[1, {HUGE}]", f'[[{HUGE}, "iv"]]', "3"])]
    proc, out = _score(tmp_path, tasks, answers)
    assert proc.returncode == 0, proc.stderr
    verdicts, summary = _verdicts(out)
    assert [verdicts[f"cat/test/{i}"]["correct"] for i in range(6)] == [False] * 5 + [True]
    assert all(v["reason"] for v in verdicts.values())
    assert summary["total"] == {"n": 6, "correct": 1} and summary["answered"] == 6


def test_score_gives_a_line_whose_checking_fails_that_failure_as_its_reason(tmp_path):
    code = AnswerSpec(type=AnswerType.CODE, tests="assert double(21) == 42\n")
    right = "def double(x):\n    return 2 * x\n"
    tasks = [_task(0, 1, AnswerSpec(type=AnswerType.INTEGER)),
             _task(1, right, code, files=[ContextFile(path="data/gone.csv", kind="csv")]),  # not in the folder
             _task(2, right, code)]
    answers = [json.dumps({"task_id": f"cat/test/{i}", "answer": a}) for i, a in enumerate([1, right, right])]
    proc, out = _score(tmp_path, tasks, answers)
    assert proc.returncode == 0, proc.stderr
    verdicts, summary = _verdicts(out)
    assert verdicts["cat/test/1"]["correct"] is False
    assert verdicts["cat/test/1"]["reason"].startswith("checking failed: FileNotFoundError") and "gone.csv" in \
        verdicts["cat/test/1"]["reason"]
    assert verdicts["cat/test/0"]["correct"] and verdicts["cat/test/2"]["correct"]
    assert summary["total"] == {"n": 3, "correct": 2}


# ---- past the interpreter's digit limit: json itself refuses the number ---------------------------------------

OVER_LIMIT = "9" * 5000  # int() and json refuse more than 4,300 digits with a ValueError, not a JSONDecodeError


def test_an_integer_past_the_digit_limit_is_no_action_and_the_episode_goes_on(env):
    env.reset(make_task(answer=7, spec=AnswerSpec(type=AnswerType.INTEGER)))
    result = env.step(f'```json\n{{"type": "submit_answer", "answer": {OVER_LIMIT}}}\n```')
    assert not result.done and not env.episode.submitted  # unreadable JSON is no action: the agent is told, not crashed
    result = env.step('```json\n{"type": "submit_answer", "answer": 7}\n```')
    assert result.done and result.reward == 1.0


def test_score_names_the_line_past_the_digit_limit_without_a_traceback(tmp_path):
    tasks = [_task(0, 7, AnswerSpec(type=AnswerType.INTEGER)), _task(1, 3, AnswerSpec(type=AnswerType.INTEGER))]
    answers = [f'{{"task_id": "cat/test/0", "answer": {OVER_LIMIT}}}', '{"task_id": "cat/test/1", "answer": 3}']
    proc, out = _score(tmp_path, tasks, answers)
    # a line json cannot read is bad input, not a checker's verdict: one error naming the file and the line
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "answers.jsonl, line 1: not readable JSON" in proc.stderr and not out.exists()
