"""The interactive coding environment: an agent explores a task's data in a sandbox and submits one answer.

It implements the one environment protocol (components.envs.protocol.Env): `reset(task) -> Observation`,
`step(action) -> StepResult(observation, reward, done, info)`, `close()`. Only the submitted answer is scored
(printing the right number earns nothing); the reward is 1.0 when the checker accepts the submission and 0.0
otherwise. The whole attempt is kept as an Episode.

Whatever the agent's code prints is data: it is shown to the agent (clipped) and read only for advisory facts
in a fixed, bounded shape, so no output, forged runner lines included, changes what step() does or makes it
raise. The checker's reason names the true answer; it goes to `Episode.check.grader_reason` and nowhere else
(not the observation, not `StepResult.info`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from components.envs import agent_code, feedback, inspect_data
from components.envs.actions import (
    ACTION_FORMAT,
    InspectData,
    ParseError,
    RunCode,
    SubmitAnswer,
    find_actions,
    no_action,
)
from components.envs.episode import Check, Episode, Turn, classify_outcome, episode_id
from components.envs.feedback import ErrorContext, ErrorInfo
from components.envs.prompt import SYSTEM_PROMPT
from components.envs.protocol import Observation, StepResult
from components.sandbox.protocol import ExecResult, Limits, Sandbox
from components.tasks.checkers import check_answer, is_missing
from components.tasks.record import AnswerType, Task

SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")

Explainer = Callable[[ErrorContext], str]


class EnvConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(default=10, ge=1, description="actions allowed, parse failures included")
    stateful: bool = Field(
        default=False, description="variables persist between run_code turns (the sandbox factory must match)"
    )
    exec_timeout_s: float = Field(default=30.0, gt=0, description="wall-clock limit per run_code / inspect_data")
    feedback: Literal["rule", "llm"] = Field(default="rule", description="who writes the error explanation")
    loop_window: int = Field(
        default=3, ge=2, description="the same action or the same error this many times in a row is a loop"
    )
    end_on_loop: bool = Field(default=False, description="end the episode as soon as a loop is seen")
    max_output_chars: int = Field(
        default=4000, ge=200, description="stdout shown per turn; the middle is elided beyond this"
    )
    inspect_max_values: int = Field(
        default=50, ge=1, description="distinct values / near matches listed by inspect_data"
    )


def make_sandbox_factory(
    config: EnvConfig, backend: Literal["process", "docker", "auto"] = "auto", limits: Limits | None = None
) -> Callable[[], Sandbox]:
    """A factory whose sandboxes match `config` (statefulness, time limit); each call starts a sandbox.

    For many episodes use `components.sandbox.warm.sandbox_supply` instead: its sandboxes are started ahead
    (or taken from a pool of wiped containers), so no episode waits for a start.
    """
    from components.sandbox.factory import open_sandbox

    lim = (limits or Limits()).model_copy(update={"timeout_s": config.exec_timeout_s})
    return lambda: open_sandbox(backend=backend, limits=lim, stateful=config.stateful)


class CodingEnv:
    """One episode at a time; `reset` starts the next (and closes the previous episode's sandbox)."""

    def __init__(
        self,
        task_root: Path,
        sandbox_factory: Callable[[], Sandbox],
        config: EnvConfig | None = None,
        explain: Explainer | None = None,
    ) -> None:
        self.config = config or EnvConfig()
        if self.config.feedback == "llm" and explain is None:
            raise ValueError("EnvConfig.feedback is 'llm' but no explain callable was given")
        self.task_root = Path(task_root)
        self._factory = sandbox_factory
        self._explain = explain
        self._sandbox: Sandbox | None = None
        self._task: Task | None = None
        self._episode: Episode | None = None
        self._started = 0.0

    # ---------------------------------------------------------------- public
    @property
    def episode(self) -> Episode:
        if self._episode is None:
            raise RuntimeError("no episode yet: call reset(task) first")
        return self._episode

    @property
    def files(self) -> list[str]:
        return [cf.path for cf in self._task.context_files] if self._task else []

    def reset(self, task: Task, sample_index: int = 0) -> Observation:
        self.close()
        missing = [cf.path for cf in task.context_files if not (self.task_root / cf.path).exists()]
        if missing:
            raise FileNotFoundError(f"task {task.task_id}: context file(s) {missing} not found under {self.task_root}")
        self._task = task
        self._sandbox = self._open_with_files(task)
        self._started = time.monotonic()
        first = self._first_observation(task)
        self._episode = Episode(
            episode_id=episode_id(task.task_id, sample_index),
            task_id=task.task_id,
            sample_index=sample_index,
            dataset=task.dataset,
            category=task.category,
            domain=task.domain.value,
            split=task.split,
            system_prompt=SYSTEM_PROMPT,
            first_observation=first,
            env_config=self.config.model_dump(mode="json"),
        )
        return Observation(text=first, turn=0, turns_left=self.config.max_turns, files=self.files)

    def step(self, action: RunCode | InspectData | SubmitAnswer | ParseError | str) -> StepResult:
        """Take one action; a string is parsed as model output (and kept as the turn's raw text)."""
        ep = self.episode
        if ep.done:
            raise RuntimeError(f"episode {ep.episode_id} is over ({ep.outcome.value}); call reset")
        start = time.monotonic()
        raw = action if isinstance(action, str) else None
        found = find_actions(raw) if raw is not None else [action]  # parse_action, keeping every action found
        parsed = found[0] if found else no_action(raw)
        turn = Turn(index=len(ep.turns), raw_text=raw, observation="")
        if isinstance(parsed, ParseError):
            turn.parse_error = parsed.problem
            turn.error = ErrorInfo(kind="ParseError", message=parsed.problem)
            turn.observation = f"Could not read an action from your reply: {parsed.problem}.\n\n{ACTION_FORMAT}"
        else:
            turn.action = parsed
            if isinstance(parsed, RunCode):
                self._run_code(parsed, turn)
            elif isinstance(parsed, InspectData):
                self._inspect(parsed, turn)
            else:
                self._submit(parsed, turn)
        if len(found) > 1:
            self._note_ignored_actions(len(found), turn)
        ep.turns.append(turn)
        if turn.error is not None:
            ep.error_kinds[turn.error.kind] = ep.error_kinds.get(turn.error.kind, 0) + 1

        done = ep.submitted
        if not ep.loop_detected:
            reason = detect_loop(ep.turns, self.config.loop_window)
            if reason:
                ep.loop_detected, ep.loop_reason = True, reason
                if not done and self.config.end_on_loop:
                    done = True
                    turn.observation += f"\n\nThe episode is stopped: {reason}."
                elif not done:
                    turn.observation += (
                        f"\n\nNote: {reason}. Repeating it will not change the result; try something different."
                    )
        left = self.config.max_turns - len(ep.turns)
        if not done and left <= 0:
            done = True
            turn.observation += "\n\nTurn limit reached: the episode is over and nothing was submitted."
        elif not done:
            turn.observation += f"\n\n[turn {len(ep.turns)} of {self.config.max_turns}" + (
                "; next turn is the last: submit your answer]" if left == 1 else "]"
            )
        turn.duration_s = time.monotonic() - start
        if done:
            self._finish()
        info = {"turn": turn.index, "error_kind": turn.error_kind, "loop_detected": ep.loop_detected}
        if done:
            info.update(outcome=ep.outcome.value, correct=bool(ep.check and ep.check.correct))
        obs = Observation(text=turn.observation, turn=len(ep.turns), turns_left=max(left, 0), files=self.files)
        return StepResult(observation=obs, reward=ep.reward if done else 0.0, done=done, info=info)

    def end_for_context(self, reason: str) -> None:
        """End the episode before a model call that would not fit the model's context (outcome context_limit).

        The policy's caller knows the context; ending here keeps the record whole instead of a cut prompt.
        """
        ep = self.episode
        if ep.done:
            return
        ep.truncation = reason
        self._finish(context_limit=True)

    def close(self) -> None:
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            sandbox.close()

    def __enter__(self) -> CodingEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- actions
    def _run_code(self, action: RunCode, turn: Turn) -> None:
        marker = agent_code.new_marker()
        result = self._exec(agent_code.wrap(action.code, marker))
        stderr, hints = agent_code.split_hints(result.stderr, marker)
        result = result.model_copy(update={"stderr": stderr})
        turn.exec_result = result
        error = feedback.classify(result, action.code, self.config.exec_timeout_s)
        if error is None:
            turn.observation = self._output_text(result)
            return
        turn.error = error
        try:
            self._explain_failure(action, turn, error, result, hints)
        except Exception as exc:  # noqa: BLE001 - the explanation is a bonus; the agent's output must not end the episode
            turn.metadata["feedback_error"] = f"{type(exc).__name__}: {exc}"[:500]
            turn.observation = f"Execution failed: {error.kind}\n\n{self._output_text(result)}"

    def _explain_failure(
        self, action: RunCode, turn: Turn, error: ErrorInfo, result: ExecResult, hints: agent_code.Hints
    ) -> None:
        sqlite_files = [
            cf.path
            for cf in self._task.context_files
            if cf.kind == "sqlite" or cf.path.lower().endswith(SQLITE_SUFFIXES)
        ]
        turn.facts = feedback.gather_facts(error, action.code, hints, self.files, sqlite_files, self._inspect_info)
        ctx = ErrorContext(
            error=error, code=action.code, facts=turn.facts, stderr_tail=feedback.agent_traceback(result.stderr)
        )
        explanation, turn.explanation_source = self._explanation(ctx, turn)
        turn.observation = feedback.render(ctx, explanation, result.truncated, self._clip(result.stdout))

    def _inspect(self, action: InspectData, turn: Turn) -> None:
        result, info = self._run_inspection(action.path, action.column, action.value)
        turn.exec_result = result
        if "error" in info:
            turn.error = ErrorInfo(kind="InspectDataError", message=str(info["error"]))
        turn.observation = self._clip(inspect_data.render(info))

    def _submit(self, action: SubmitAnswer, turn: Turn) -> None:
        ep, task = self.episode, self._task
        ep.submitted, ep.submitted_answer = True, action.answer
        if task.answer_spec.type == AnswerType.CODE:
            # a fresh sandbox: the tests must not see what the agent left in a stateful namespace
            checker_box = self._open_with_files(task)
            try:
                verdict = check_answer(task, action.answer, sandbox=checker_box)
            finally:
                checker_box.close()
        else:
            verdict = check_answer(task, action.answer)
        ep.check = Check(correct=verdict.correct, grader_reason=verdict.reason)
        turn.observation = submit_observation(action.answer, verdict.correct, verdict.reason)

    # ---------------------------------------------------------------- helpers
    @staticmethod
    def _note_ignored_actions(n_found: int, turn: Turn) -> None:
        """Say so when a reply held more than one action: only the first was taken (see parse_action)."""
        if turn.action is None:
            return
        turn.metadata["ignored_actions"] = n_found - 1
        if isinstance(turn.action, SubmitAnswer):  # the episode is over: nothing left to advise
            return
        turn.observation += (
            f"\n\nNote: your reply held {n_found} actions; only the first ({turn.action.type}) was taken. "
            "Send one action per turn and wait for its result."
        )

    def _open_with_files(self, task: Task) -> Sandbox:
        sandbox = self._factory()
        try:
            for cf in task.context_files:
                src = self.task_root / cf.path
                (sandbox.upload_dir if src.is_dir() else sandbox.upload_file)(src, cf.path)
        except BaseException:
            sandbox.close()
            raise
        return sandbox

    def _exec(self, code: str) -> ExecResult:
        if self._sandbox is None:
            raise RuntimeError("the sandbox is closed: call reset(task) first")
        return self._sandbox.exec(code, timeout_s=self.config.exec_timeout_s)

    def _inspect_info(self, path: str) -> dict[str, Any]:
        return self._run_inspection(path, row_counts=False)[1]

    def _run_inspection(
        self, path: str, column: str | None = None, value: str | None = None, row_counts: bool = True
    ) -> tuple[ExecResult, dict[str, Any]]:
        """Run the inspection snippet under a fresh marker; its result and what it reported."""
        marker = inspect_data.new_marker()
        snippet = inspect_data.build_snippet(
            path, column, value, self.config.inspect_max_values, row_counts=row_counts, marker=marker
        )
        result = self._exec(snippet)
        return result, inspect_data.parse_result(result, marker)

    def _explanation(self, ctx: ErrorContext, turn: Turn) -> tuple[str, Literal["rule", "llm"]]:
        if self.config.feedback == "llm" and self._explain is not None:
            try:
                return self._explain(ctx).strip(), "llm"
            except Exception as exc:  # noqa: BLE001 - a failing explainer must not end the episode
                turn.metadata["explain_error"] = f"{type(exc).__name__}: {exc}"
        return feedback.explain_rule(ctx), "rule"

    def _output_text(self, result: ExecResult) -> str:
        parts = [
            self._clip(result.stdout.rstrip())
            if result.stdout.strip()
            else "(the code ran and printed nothing; print() what you want to see)"
        ]
        if result.stderr.strip():
            parts.append("stderr:\n" + self._clip(result.stderr.rstrip(), 1000))
        if result.truncated:
            parts.append(feedback.TRUNCATED_NOTE)
        return "\n\n".join(parts)

    def _clip(self, text: str, limit: int | None = None) -> str:
        limit = limit or self.config.max_output_chars
        if len(text) <= limit:
            return text
        head, tail = text[: limit * 2 // 3], text[-(limit // 3) :]
        return f"{head}\n... [{len(text) - len(head) - len(tail)} characters not shown] ...\n{tail}"

    def _first_observation(self, task: Task) -> str:
        if task.context_files:
            files = "Files in your working directory:\n" + "\n".join(
                f"- {cf.path} ({cf.kind})" for cf in task.context_files
            )
        else:
            files = "No data files come with this task."
        mode = (
            "Variables persist between run_code turns."
            if self.config.stateful
            else "Each run_code starts a fresh Python interpreter: variables do not carry over between turns."
        )
        parts = [task.prompt.strip(), files]  # the actions are listed in the system prompt
        if task.answer_spec.type == AnswerType.CODE:
            parts.append(
                'This is a coding task: submit the complete program as a string in "answer"; '
                "it is run against hidden tests."
            )
        parts.append(
            f"You have {self.config.max_turns} turns. {mode} Each run is limited to {self.config.exec_timeout_s:g} s."
        )
        return "\n\n".join(parts)

    def _finish(self, context_limit: bool = False) -> None:
        ep = self.episode
        ep.outcome = classify_outcome(ep.submitted, ep.check, ep.loop_detected, context_limit)
        ep.reward = 1.0 if ep.check is not None and ep.check.correct else 0.0
        ep.duration_s = time.monotonic() - self._started
        self.close()


def submit_observation(answer: Any, correct: bool, reason: str) -> str:
    """What the agent is told after submitting: correct or incorrect, and for an answer that could not be read at
    all, a generic word saying so. The checker's reason itself names the truth, so it is never shown."""
    if correct:
        return "Answer submitted: correct. The episode is over."
    why = ""
    if is_missing(answer):
        why = " (no answer was given)"
    elif reason.startswith("unparsable"):  # checkers.check_value's prefix for an answer it could not read
        why = " (the answer could not be read as the kind of value the task asks for)"
    return f"Answer submitted: incorrect{why}. The episode is over."


def detect_loop(turns: list[Turn], window: int) -> str | None:
    """A description of the loop ending at the last turn, or None.

    A loop is the same run_code/inspect_data action `window` times in a row, or the same error (kind and
    message) `window` times in a row, whatever the code was.
    """
    if len(turns) < window:
        return None
    last = turns[-window:]
    span = f"turns {last[0].index + 1}-{last[-1].index + 1}"
    actions = [_action_key(t) for t in last]
    if actions[0] is not None and all(a == actions[0] for a in actions):
        what = "code" if isinstance(last[0].action, RunCode) else "inspect_data action"
        return f"the same {what} was sent {window} times in a row ({span})"
    errors = [(t.error.kind, t.error.message) if t.error else None for t in last]
    if errors[0] is not None and all(e == errors[0] for e in errors):
        return f"the same error ({errors[0][0]}) came {window} times in a row ({span})"
    return None


def _action_key(turn: Turn) -> str | None:
    """run_code/inspect_data actions compared modulo trailing whitespace (a re-sent block often differs only there)."""
    if isinstance(turn.action, RunCode):
        return "code:" + "\n".join(line.rstrip() for line in turn.action.code.strip().splitlines())
    if isinstance(turn.action, InspectData):
        return "inspect:" + turn.action.model_dump_json()
    return None
