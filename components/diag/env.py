"""The diagnostic environment: an agent works up one patient case, exam by exam, and gives one final diagnosis.

It implements the one environment protocol (components.envs.protocol.Env), as the coding environment does, so the
rollout engine plays either: `reset(case, sample_index) -> Observation`, `step(text or action) -> StepResult`,
`episode`, `end_for_context(reason)`, `close()`. The first observation is DiagGym's initial inquiry: the case's
profile and the action format. Ordering exams (names matched to the catalogue through names and synonyms; an
unknown name is answered with the closest catalogue names and orders nothing) returns each result from the world
model, as DiagGym blocks ("Exam name:" / "Exam results:"). The final diagnosis ends the episode; the turn limit
(12 by default, as DiagGym) ends it too. Reward (components.diag.grading) only at the end.

The episode is the platform's `Episode`. Its fields keep their meaning: the diagnosis is a `SubmitAnswer` turn
(`submitted`, `submitted_answer`, `check` with the grader-only reason naming the truth, outcome correct /
wrong_answer / no_answer / stuck_loop / context_limit), parse failures are `parse_error` turns. `Turn.action` holds
only the coding actions, so an exam order is a turn with `action=None` and the order in `turn.metadata`
("action", "ordered", "unknown"). `episode.diag` (envs.episode.DiagOutcome) holds the score: the diagnosis given,
correct, the exams ordered (credit names), their precision/recall/F1 against the key exams, turns, well-formedness
and the reward's parts; `episode.metadata["world_model"]` names the world model. The true diagnosis and the key
exams are never shown to the agent and are kept only in `check.grader_reason`. An action passed as an object (not
model text) is recorded with its JSON as `raw_text` (`turn.metadata["rendered_action"]`), so that `messages()` shows
it.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from components.diag.actions import (
    ACTION_FORMAT,
    Diagnose,
    OrderExams,
    find_diag_actions,
    no_diag_action,
)
from components.diag.catalogue import Catalogue, default_catalogue
from components.diag.grading import RewardConfig, grade_diagnosis, reward
from components.diag.metrics import exam_scores
from components.diag.record import Case
from components.diag.world import PriorExam, WorldModel, exam_block
from components.envs.actions import ParseError, SubmitAnswer
from components.envs.episode import Check, DiagOutcome, Episode, Turn, classify_outcome, episode_id
from components.envs.feedback import ErrorInfo
from components.envs.protocol import Observation, StepResult

DIAG_SYSTEM_PROMPT = (
    "You are a diagnostic assistant working up a patient who has come to hospital. From the presentation, order the "
    "exams that establish the diagnosis (each result comes back on the next turn), then give one final diagnosis. "
    "Order what a clinician would order first: every turn and every unnecessary exam lowers your score, and a list "
    "of candidate diagnoses is not a diagnosis."
)
FINAL_OBSERVATION = "Final diagnosis recorded. The case is closed."


class DiagEnvConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(default=12, ge=1, description="actions allowed, parse failures included (DiagGym: 12)")
    max_exams_per_turn: int = Field(default=4, ge=1, description="exams one order may hold; the rest are not ordered")
    reward: RewardConfig = Field(default_factory=RewardConfig)
    loop_window: int = Field(default=3, ge=2, description="the same order this many times in a row is a loop")
    world_seed: int = Field(default=0, description="seeds the world model's draws")
    vary_world_by_sample: bool = Field(default=True, description="each sample of a case sees its own draws")
    suggestions: int = Field(default=3, ge=0, description="closest catalogue names offered for an unknown exam")


class DiagEnv:
    """One episode at a time; `reset` starts the next."""

    def __init__(self, world: WorldModel, config: DiagEnvConfig | None = None, catalogue: Catalogue | None = None):
        self.world = world
        self.config = config or DiagEnvConfig()
        self.catalogue = catalogue or default_catalogue()
        self._case: Case | None = None
        self._episode: Episode | None = None
        self._history: list[PriorExam] = []
        self._ordered: list[str] = []  # catalogue names, in order of first order
        self._started = 0.0

    # ---------------------------------------------------------------- public
    @property
    def episode(self) -> Episode:
        if self._episode is None:
            raise RuntimeError("no episode yet: call reset(case) first")
        return self._episode

    @property
    def history(self) -> list[PriorExam]:
        """The exams done so far and their results, oldest first."""
        return list(self._history)

    def reset(self, case: Case, sample_index: int = 0) -> Observation:
        self._case, self._history, self._ordered = case, [], []
        self._started = time.monotonic()
        first = self._first_observation(case)
        self._episode = Episode(
            episode_id=episode_id(case.case_id, sample_index), task_id=case.case_id, sample_index=sample_index,
            dataset=f"diag_{case.source}", category=str(case.metadata.get("presentation") or "diagnosis"),
            domain="diagnosis", system_prompt=DIAG_SYSTEM_PROMPT, first_observation=first,
            env_config=self.config.model_dump(mode="json"),
            metadata={"world_model": getattr(self.world, "name", type(self.world).__name__)})
        return Observation(text=first, turn=0, turns_left=self.config.max_turns)

    def step(self, action: OrderExams | Diagnose | ParseError | str) -> StepResult:
        """Take one action; a string is parsed as model output (and kept as the turn's raw text)."""
        ep = self.episode
        if ep.done:
            raise RuntimeError(f"episode {ep.episode_id} is over ({ep.outcome.value}); call reset")
        start = time.monotonic()
        raw = action if isinstance(action, str) else None
        found = find_diag_actions(raw) if raw is not None else [action]
        parsed = found[0] if found else no_diag_action(raw)
        turn = Turn(index=len(ep.turns), raw_text=raw, observation="")
        if raw is None and isinstance(parsed, OrderExams | Diagnose):
            # Episode.messages() renders Turn.action, which holds only coding actions: an order given as an object
            # would be an empty assistant message, so its JSON stands in for the model's text (and says so)
            turn.raw_text, turn.metadata["rendered_action"] = parsed.model_dump_json(), True
        if isinstance(parsed, ParseError):
            turn.parse_error = parsed.problem
            turn.error = ErrorInfo(kind="ParseError", message=parsed.problem)
            turn.observation = f"Could not read an action from your reply: {parsed.problem}.\n\n{ACTION_FORMAT}"
        elif isinstance(parsed, OrderExams):
            self._order(parsed, turn)
        else:
            self._diagnose(parsed, turn)
        if len(found) > 1:
            turn.metadata["ignored_actions"] = len(found) - 1
            if not isinstance(parsed, Diagnose):
                turn.observation += (f"\n\nNote: your reply held {len(found)} actions; only the first was taken. "
                                     "Send one action per turn and wait for its result.")
        ep.turns.append(turn)
        if turn.error is not None:
            ep.error_kinds[turn.error.kind] = ep.error_kinds.get(turn.error.kind, 0) + 1
        done = ep.submitted
        if not ep.loop_detected and not done:
            reason = detect_repeat(ep.turns, self.config.loop_window)
            if reason:
                ep.loop_detected, ep.loop_reason = True, reason
                turn.observation += f"\n\nNote: {reason}. Repeating it will not tell you more."
        left = self.config.max_turns - len(ep.turns)
        if not done and left <= 0:
            done = True
            turn.observation += "\n\nTurn limit reached: the case is closed without a diagnosis."
        elif not done:
            turn.observation += f"\n\n[turn {len(ep.turns)} of {self.config.max_turns}" + (
                "; next turn is the last: give your final diagnosis]" if left == 1 else "]")
        turn.duration_s = time.monotonic() - start
        if done:
            self._finish()
        info: dict[str, Any] = {"turn": turn.index, "error_kind": turn.error_kind, "loop_detected": ep.loop_detected}
        if done:
            info.update(outcome=ep.outcome.value, correct=bool(ep.check and ep.check.correct))
        obs = Observation(text=turn.observation, turn=len(ep.turns), turns_left=max(left, 0))
        return StepResult(observation=obs, reward=ep.reward if done else 0.0, done=done, info=info)

    def end_for_context(self, reason: str) -> None:
        """End the episode before a model call that would not fit the model's context (outcome context_limit)."""
        ep = self.episode
        if ep.done:
            return
        ep.truncation = reason
        self._finish(context_limit=True)

    def close(self) -> None:
        """Nothing to release: the world model belongs to the caller."""

    def __enter__(self) -> DiagEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- actions
    def _order(self, action: OrderExams, turn: Turn) -> None:
        case, cfg = self._case, self.config
        names = list(dict.fromkeys(action.exams))
        taken, skipped = names[: cfg.max_exams_per_turn], names[cfg.max_exams_per_turn:]
        seed = cfg.world_seed + (self.episode.sample_index if cfg.vary_world_by_sample else 0)
        blocks, ordered, unknown = [], [], []
        for name in taken:
            exam = self.catalogue.exam(name)
            if exam is None:
                unknown.append(name)
                near = self.catalogue.suggest(name, cfg.suggestions) if cfg.suggestions else []
                hint = f" Closest exam names: {', '.join(near)}." if near else ""
                blocks.append(f"'{name}' is not an exam in this hospital's catalogue; nothing was ordered.{hint}")
                continue
            result = self.world.simulate(case, exam.name, self._history, seed=seed)
            self._history.append(PriorExam(exam.name, result))
            ordered.append(exam.name)
            if exam.name not in self._ordered:
                self._ordered.append(exam.name)
            blocks.append(exam_block(exam.name, result))
        if skipped:
            blocks.append(f"Not ordered (at most {cfg.max_exams_per_turn} exams per turn): {', '.join(skipped)}.")
        turn.metadata.update(action=action.model_dump(), ordered=ordered, unknown=unknown)
        if unknown:
            turn.error = ErrorInfo(kind="UnknownExam", message=f"not in the catalogue: {', '.join(unknown)}")
        turn.observation = "\n\n".join(blocks)

    def _diagnose(self, action: Diagnose, turn: Turn) -> None:
        ep = self.episode
        verdict = grade_diagnosis(action.diagnosis, self._case, self.catalogue, self.config.reward)
        turn.action = SubmitAnswer(answer=action.diagnosis)
        ep.submitted, ep.submitted_answer = True, action.diagnosis
        ep.check = Check(correct=verdict.correct, grader_reason=verdict.reason)
        turn.metadata.update(well_formed=verdict.well_formed)
        turn.observation = FINAL_OBSERVATION

    # ---------------------------------------------------------------- helpers
    def _first_observation(self, case: Case) -> str:
        cfg = self.config
        return (f"{case.profile.strip()}\n\n{ACTION_FORMAT}\n\nYou have {cfg.max_turns} turns and may order up to "
                f"{cfg.max_exams_per_turn} exams per turn.")

    def _finish(self, context_limit: bool = False) -> None:
        ep, case = self.episode, self._case
        key = list(dict.fromkeys(self._credit(k) for k in case.key_exams))
        ordered = list(dict.fromkeys(self._credit(k) for k in self._ordered))
        scores = exam_scores(ordered, key)
        correct = bool(ep.check and ep.check.correct)
        well_formed = bool(ep.submitted and ep.turns and ep.turns[-1].metadata.get("well_formed"))
        parts = reward(self.config.reward, correct, scores.f1, len(ep.turns))
        ep.reward = parts.total
        ep.outcome = classify_outcome(ep.submitted, ep.check, ep.loop_detected, context_limit)
        ep.duration_s = time.monotonic() - self._started
        ep.diag = DiagOutcome(diagnosis=ep.submitted_answer if ep.submitted else None, correct=correct,
                              exams_ordered=ordered, exams=scores, turns=len(ep.turns), well_formed=well_formed,
                              reward=parts)
        if ep.check is not None:  # grader only: the truth, beside the verdict's reason
            ep.check.grader_reason += f"; key exams: {', '.join(key)}"

    def _credit(self, name: str) -> str:
        exam = self.catalogue.exams.get(name) or self.catalogue.exam(name)
        return exam.credit if exam is not None else name


def detect_repeat(turns: list[Turn], window: int) -> str | None:
    """The same exam order (same catalogue exams) `window` times in a row, ending at the last turn."""
    if len(turns) < window:
        return None
    last = turns[-window:]
    orders = [tuple(sorted(t.metadata.get("ordered") or ())) if "ordered" in t.metadata else None for t in last]
    if orders[0] and all(o == orders[0] for o in orders):
        return f"the same exams were ordered {window} times in a row (turns {last[0].index + 1}-{last[-1].index + 1})"
    return None
