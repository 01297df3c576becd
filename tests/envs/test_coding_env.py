"""The environment end to end on the real process sandbox: scripted agents, rewards, outcomes, loops."""

from __future__ import annotations

import json

import pytest

from components.envs.actions import InspectData, RunCode, SubmitAnswer
from components.envs.episode import Outcome
from components.envs.protocol import Env, Observation, StepResult
from components.tasks.record import AnswerSpec, AnswerType, ContextFile
from tests.envs.conftest import PATIENTS, make_task

MEAN_FEMALE_AGE_CODE = (
    "import pandas as pd\ndf = pd.read_csv('data/patients.csv')\nprint(df.loc[df['sex'] == 'F', 'age'].mean())\n"
)


def test_first_observation_lists_files_and_format(make_env):
    env = make_env(max_turns=4)
    obs = env.reset(make_task())
    assert obs.text.startswith("What is the mean age of the female patients?")
    for path in ("data/patients.csv", "data/pharmacy.db", "data/seqs.fasta"):
        assert path in obs.text and path in obs.files
    # the actions are listed once, in the system prompt every policy is given
    assert '"type": "run_code"' in env.episode.system_prompt and "submit_answer" in env.episode.system_prompt
    assert env.episode.messages()[0] == {"role": "system", "content": env.episode.system_prompt}
    assert obs.turns_left == 4


def test_the_coding_environment_implements_the_one_protocol(make_env):
    env = make_env(max_turns=2)
    obs = env.reset(make_task())
    result = env.step(RunCode(code="print(1)"))
    assert isinstance(env, Env) and type(obs) is Observation and type(result) is StepResult  # the types DiagEnv uses
    assert result.observation.files == obs.files and result.observation.turns_left == 1


def test_scripted_agent_inspects_then_solves_csv_task(make_env):
    env = make_env(max_turns=5)
    task = make_task()
    env.reset(task)
    seen = env.step(InspectData(path="data/patients.csv"))
    assert not seen.done and seen.reward == 0.0
    # the agent learns the schema from the observation, not from the test
    assert "sex" in seen.observation.text and "age" in seen.observation.text and "10 rows" in seen.observation.text
    ran = env.step(RunCode(code=MEAN_FEMALE_AGE_CODE))
    assert ran.info["error_kind"] is None
    value = float(ran.observation.text.split()[0])
    done = env.step(SubmitAnswer(answer=value))
    assert done.done and done.reward == 1.0
    ep = env.episode
    assert ep.outcome == Outcome.CORRECT and ep.check.correct
    assert [t.action.type for t in ep.turns] == ["inspect_data", "run_code", "submit_answer"]
    assert ep.submitted_answer == pytest.approx(task.answer)
    assert ep.turns[1].exec_result.status == "ok" and ep.turns[1].duration_s > 0


def test_wrong_submission_scores_zero(make_env):
    env = make_env(max_turns=3)
    env.reset(make_task())
    res = env.step(SubmitAnswer(answer=12.5))
    assert res.done and res.reward == 0.0
    assert env.episode.outcome == Outcome.WRONG_ANSWER and not env.episode.check.correct


def test_turn_limit_without_submit_is_no_answer(make_env):
    env = make_env(max_turns=2)
    env.reset(make_task())
    first = env.step(RunCode(code="print(1)"))
    assert not first.done and first.observation.turns_left == 1
    last = env.step(RunCode(code="print(2)"))
    assert last.done and last.reward == 0.0
    assert env.episode.outcome == Outcome.NO_ANSWER and "Turn limit" in last.observation.text
    with pytest.raises(RuntimeError, match="over"):
        env.step(RunCode(code="print(3)"))


def test_printing_the_right_answer_is_not_scored(make_env):
    env = make_env(max_turns=2)
    task = make_task()
    env.reset(task)
    for _ in range(2):
        res = env.step(RunCode(code=MEAN_FEMALE_AGE_CODE + "print('ANSWER:', 'final')\n"))
    assert str(task.answer) in env.episode.turns[0].observation  # the right number was printed ...
    assert res.done and res.reward == 0.0  # ... and earned nothing
    assert env.episode.outcome == Outcome.NO_ANSWER and env.episode.check is None


def test_repeated_failing_code_is_stuck_loop(make_env):
    env = make_env(max_turns=5, loop_window=3)
    env.reset(make_task())
    bad = "import pandas as pd\ndf = pd.read_csv('data/patients.csv')\nprint(df['gender'].value_counts())\n"
    results = [env.step(RunCode(code=bad)) for _ in range(3)]
    assert "Repeating it will not change the result" in results[2].observation.text
    assert env.episode.loop_detected and "3 times in a row" in env.episode.loop_reason
    env.step(RunCode(code="print('still trying')"))
    final = env.step(SubmitAnswer(answer=1))
    assert final.done and final.reward == 0.0
    # a loop outranks wrong_answer: it names why the attempt failed
    assert env.episode.outcome == Outcome.STUCK_LOOP
    assert env.episode.error_kinds == {"KeyError": 3}


def test_same_error_from_different_code_is_a_loop_and_can_end_the_episode(make_env):
    env = make_env(max_turns=10, loop_window=2, end_on_loop=True)
    env.reset(make_task())
    env.step(RunCode(code="print(undefined_a)"))
    assert not env.episode.done
    res = env.step(RunCode(code="x = 1\nprint(undefined_a)"))  # different code, same NameError
    assert res.done and env.episode.outcome == Outcome.STUCK_LOOP and "The episode is stopped" in res.observation.text


def test_correct_answer_beats_an_earlier_loop(make_env):
    env = make_env(max_turns=6, loop_window=2)
    task = make_task()
    env.reset(task)
    env.step(RunCode(code="print(1/0)"))
    env.step(RunCode(code="print(1/0)"))
    assert env.episode.loop_detected
    assert env.step(SubmitAnswer(answer=task.answer)).reward == 1.0
    assert env.episode.outcome == Outcome.CORRECT


def test_stateful_mode_keeps_variables_and_stateless_does_not(make_env):
    stateful = make_env(max_turns=4, stateful=True)
    stateful.reset(make_task())
    stateful.step(RunCode(code="total = 40 + 2"))
    stateful.step(InspectData(path="data/patients.csv"))  # inspection must not disturb the namespace
    kept = stateful.step(RunCode(code="print(total, sorted(k for k in globals() if k.startswith('_medgym')))"))
    assert kept.observation.text.startswith("42 []")

    stateless = make_env(max_turns=4, stateful=False)
    stateless.reset(make_task())
    stateless.step(RunCode(code="total = 40 + 2"))
    gone = stateless.step(RunCode(code="print(total)"))
    assert gone.info["error_kind"] == "NameError"


def test_text_actions_are_parsed_and_parse_failures_cost_a_turn(make_env):
    env = make_env(max_turns=3)
    task = make_task()
    env.reset(task)
    bad = env.step("I think the answer is about fifty.")
    assert not bad.done and bad.info["error_kind"] == "ParseError"
    assert '"type": "submit_answer"' in bad.observation.text and bad.observation.turns_left == 2
    ran = env.step("Let me compute it.\n```python\nprint(6 * 7)\n```")
    assert ran.observation.text.startswith("42")
    final = env.step(f'```json\n{{"type": "submit_answer", "answer": {json.dumps(task.answer)}}}\n```')
    assert final.reward == 1.0
    turns = env.episode.turns
    assert turns[0].action is None and turns[0].parse_error and turns[0].raw_text.startswith("I think")
    assert isinstance(turns[1].action, RunCode) and turns[1].raw_text.startswith("Let me")


def test_code_task_is_checked_in_a_fresh_sandbox(make_env):
    spec = AnswerSpec(
        type=AnswerType.CODE,
        tests=f"assert count_female('data/patients.csv') == {sum(1 for p in PATIENTS if p[2] == 'F')}\n",
    )
    task = make_task(
        "unit-code-0",
        prompt="Write count_female(path) returning the number of female patients.",
        answer="reference",
        spec=spec,
        files=[ContextFile(path="data/patients.csv", kind="csv")],
    )
    good = (
        "import csv\ndef count_female(path):\n"
        "    return sum(1 for r in csv.DictReader(open(path)) if r['sex'] == 'F')\n"
    )
    env = make_env(max_turns=3, stateful=True)
    env.reset(task)
    # defining the function in the stateful namespace must not help a submission that lacks it
    env.step(RunCode(code=good))
    assert env.step(SubmitAnswer(answer="x = 1\n")).reward == 0.0
    env.reset(task)
    assert env.step(SubmitAnswer(answer=good)).reward == 1.0
    assert env.episode.outcome == Outcome.CORRECT


def test_timeout_and_truncation_are_explained(make_env):
    env = make_env(max_turns=4, exec_timeout_s=1.0)
    env.reset(make_task())
    slow = env.step(RunCode(code="while True:\n    pass\n"))
    assert slow.info["error_kind"] == "TimeoutError"
    assert "time limit" in slow.observation.text and "infinite loops" in slow.observation.text
    loud = env.step(RunCode(code="print('x' * 200_000)"))
    assert env.episode.turns[-1].exec_result.truncated
    assert "output limit" in loud.observation.text


def test_llm_feedback_replaces_the_rule_explanation(make_env):
    seen = []

    def explain(ctx):
        seen.append(ctx)
        return f"LLM says: look at line {ctx.error.line}"

    env = make_env(max_turns=3, feedback="llm", explain=explain)
    env.reset(make_task())
    res = env.step(RunCode(code="x = 1\ny = x / 0\n"))
    assert "LLM says: look at line 2" in res.observation.text
    assert "What it usually means" not in res.observation.text
    assert seen[0].error.kind == "ZeroDivisionError" and env.episode.turns[0].explanation_source == "llm"


def test_missing_context_file_is_a_clear_error(make_env):
    env = make_env()
    task = make_task(files=[ContextFile(path="data/absent.csv", kind="csv")])
    with pytest.raises(FileNotFoundError, match="absent.csv"):
        env.reset(task)


def test_a_reply_with_code_then_a_submit_runs_the_code_and_says_the_submit_was_not_taken(make_env):
    env = make_env(max_turns=3)
    env.reset(make_task())
    res = env.step('```python\nprint(6 * 7)\n```\n{"type": "submit_answer", "answer": 42}')
    assert not res.done and res.observation.text.startswith("42")
    assert "only the first (run_code) was taken" in res.observation.text
    assert env.episode.turns[-1].metadata["ignored_actions"] == 1 and not env.episode.submitted
