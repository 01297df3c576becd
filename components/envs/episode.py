"""The Episode record: one agent's attempt at one task, turn by turn. Every later stage reads this one shape.

Rollouts write it, evaluation counts its outcomes, SFT/DPO/the verifier train on its turns (train-split episodes
only: `split` records where the task came from, and a training stage refuses any other). The training
fields (token ids, loss masks, log-probs) are optional on each turn so that environment-only runs stay small
and trainers can fill them in without a second record type; `schema_version` moves when a field's meaning does.

Outcome precedence (first that applies):
  correct       the submitted answer was checked correct (a loop seen earlier does not matter: it got there)
  stuck_loop    no correct answer, and the same code or the same error came N times in a row at some point
  wrong_answer  submitted, checked wrong, no loop seen
  no_answer     the turn limit came without a submission, no loop seen
  context_limit the next model call would not fit the model's context: ended before it (see `truncation`)
A loop outranks wrong_answer and no_answer because it names the cause: the agent stopped making progress.

The checker's reason ('1 outside [27.4474, 30.3366]') states the true answer, so the record keeps it in one
field only, `Check.grader_reason`, for people and grader-side reports. Nothing the agent saw holds it (the
observation after a submit says only correct or incorrect), and `messages()`, which SFT/DPO and verifiers
train on, renders observations and model text alone. A training view built from the record must leave
`check` out, as `messages()` does.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, model_validator

from components.common.io import RecordError, iter_jsonl, write_jsonl
from components.envs.actions import InspectData, RunCode, SubmitAnswer
from components.envs.feedback import ErrorInfo
from components.sandbox.result import ExecResult

# 2: Check.reason became Check.grader_reason (grader-only: it holds the truth)
# 3: who played (policy), the system prompt, token counts, model vs environment time, context_limit, checksum
# 4: DiagGym's outcome is the typed field `diag` (it was the untyped metadata["diag"])
SCHEMA_VERSION = 4


class Outcome(StrEnum):
    CORRECT = "correct"
    WRONG_ANSWER = "wrong_answer"
    NO_ANSWER = "no_answer"
    STUCK_LOOP = "stuck_loop"
    CONTEXT_LIMIT = "context_limit"


class Check(BaseModel):
    """The checker's verdict on the submission (tasks.checkers.CheckResult, its reason renamed to say who may read it)."""

    model_config = ConfigDict(extra="forbid")

    correct: bool
    # GRADER ONLY: the checker's explanation, which names the true answer. Never put it in an observation,
    # a prompt, training data or a verifier's input. Version-1 records called it `reason`.
    grader_reason: str = Field(validation_alias=AliasChoices("grader_reason", "reason"))


class ExamScore(BaseModel):
    """The exams a diagnostic agent ordered against the case's key exams, both under credit names
    (components.diag.metrics.exam_scores computes it)."""

    precision: float
    recall: float
    f1: float
    ordered: int  # distinct exams ordered
    key: int  # distinct key exams
    hits: int


class RewardParts(BaseModel):
    """DiagGym's reward and its parts (components.diag.grading.reward)."""

    accuracy: float
    exam_f1: float
    turn_penalty: float  # 0 unless the diagnosis is right
    total: float


class DiagOutcome(BaseModel):
    """What a finished DiagGym episode scored. The true diagnosis and the key exams are not here: they are
    grader-only, in `Check.grader_reason`."""

    model_config = ConfigDict(extra="forbid")

    diagnosis: str | None = None  # the final diagnosis given (None: the case closed without one)
    correct: bool
    exams_ordered: list[str]  # credit names, in order of first order
    exams: ExamScore
    turns: int
    well_formed: bool  # a right answer, or one that is not a list and not overlong: read, never paid
    reward: RewardParts


class Sampling(BaseModel):
    """How the model was asked to sample; `seed` makes an episode's draws reproducible."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(default=0.0, ge=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_new_tokens: int = Field(default=512, gt=0)
    seed: int = 0


class PolicyInfo(BaseModel):
    """Who played the episode: the backend (hf, vllm, openai, scripted), the model and how it sampled."""

    model_config = ConfigDict(extra="forbid")

    backend: str
    model: str
    sampling: Sampling = Field(default_factory=Sampling)


class Turn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index: int = Field(ge=0)
    raw_text: str | None = None  # the model's output as produced, when the action came from text
    action: RunCode | InspectData | SubmitAnswer | None = Field(default=None, discriminator="type")
    parse_error: str | None = None  # set when raw_text held no valid action (action is then None)
    observation: str  # exactly what the agent was shown after this action
    exec_result: ExecResult | None = None  # the sandbox run behind run_code / inspect_data
    error: ErrorInfo | None = None  # structured error of a failed run_code (or kind "ParseError")
    facts: list[str] = Field(default_factory=list)  # what the feedback looked up (columns, files)
    explanation_source: Literal["rule", "llm"] | None = None
    duration_s: float = 0.0  # environment time for this step, sandbox included
    # ---- filled by rollout/training stages; absent for environment-only runs
    model_time_s: float | None = None
    prompt_token_ids: list[int] | None = None  # the exact context tokens the model saw
    response_token_ids: list[int] | None = None  # the exact tokens it produced (never re-tokenized)
    response_logprobs: list[float] | None = None
    loss_mask: list[int] | None = None  # per response token; 0 for tokens not to train on
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def error_kind(self) -> str | None:
        return self.error.kind if self.error else None


class Episode(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    episode_id: str  # task_id and sample index, unique within a rollout
    task_id: str
    sample_index: int = 0
    dataset: str | None = None
    category: str | None = None
    domain: str | None = None
    # the task's split (train, valid, test): training stages take train episodes only. None on episodes written
    # before it was recorded, and on DiagGym's (its environment does not set it: its cases hold their split)
    split: str | None = None
    system_prompt: str | None = None  # the system message every policy was given (components.envs.prompt)
    first_observation: str  # the prompt the agent started from
    turns: list[Turn] = Field(default_factory=list)
    submitted: bool = False
    submitted_answer: Any = None
    check: Check | None = None
    reward: float = 0.0
    outcome: Outcome | None = None  # None while the episode runs
    loop_detected: bool = False
    loop_reason: str | None = None  # e.g. "same code 3 times in a row (turns 2-4)"
    error_kinds: dict[str, int] = Field(default_factory=dict)
    duration_s: float = 0.0
    env_config: dict[str, Any] = Field(default_factory=dict)
    # ---- filled by rollouts; absent for environment-only runs
    policy: PolicyInfo | None = None
    truncation: str | None = None  # why a context_limit episode ended, e.g. "prompt 2051 + 512 new > 2048"
    prompt_tokens: int = 0  # the last model call's context length (the episode's longest prompt)
    completion_tokens: int = 0  # tokens the model produced over all turns
    model_time_s: float = 0.0  # time waiting for the model (a batch's time is shared by its members)
    env_time_s: float = 0.0  # time in the environment: sandbox starts and runs, checking
    diag: DiagOutcome | None = None  # DiagGym episodes, once finished (components.diag.env); None for coding ones
    metadata: dict[str, Any] = Field(default_factory=dict)
    # sha256 of the record without this field, set when a rollout shard is written: an edited line fails it
    checksum: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _diag_from_metadata(cls, data: Any) -> Any:
        """Records written before schema 4 kept DiagGym's outcome in metadata["diag"]: read it as the typed field
        (on a copy: a shard's checksum is computed from the row as stored)."""
        if isinstance(data, dict) and data.get("diag") is None and isinstance(data.get("metadata"), dict) \
                and "diag" in data["metadata"]:
            metadata = dict(data["metadata"])
            data = {**data, "diag": metadata.pop("diag"), "metadata": metadata}
        return data

    @property
    def done(self) -> bool:
        return self.outcome is not None

    def messages(self) -> list[dict[str, str]]:
        """The episode as chat messages (user: observations, assistant: model text), for SFT and inspection."""
        out = [{"role": "system", "content": self.system_prompt}] if self.system_prompt is not None else []
        out.append({"role": "user", "content": self.first_observation})
        for t in self.turns:
            out.append({"role": "assistant", "content": t.raw_text if t.raw_text is not None else _action_text(t)})
            out.append({"role": "user", "content": t.observation})
        return out


def _action_text(turn: Turn) -> str:
    return turn.action.model_dump_json() if turn.action is not None else ""


def episode_id(task_id: str, sample_index: int) -> str:
    """An episode's id: its task and sample index, unique within a rollout."""
    return f"{task_id}#{sample_index}"


def classify_outcome(submitted: bool, check: Check | None, loop_detected: bool, context_limit: bool = False
                     ) -> Outcome:
    """See the module docstring for the precedence."""
    if submitted and check is not None and check.correct:
        return Outcome.CORRECT
    if context_limit:
        return Outcome.CONTEXT_LIMIT
    if loop_detected:
        return Outcome.STUCK_LOOP
    return Outcome.WRONG_ANSWER if submitted else Outcome.NO_ANSWER


def record_checksum(episode: Episode) -> str:
    """The digest a shard stores with each record (see `row_checksum`)."""
    return row_checksum(episode.model_dump(mode="json"))


def row_checksum(row: dict[str, Any]) -> str:
    """sha256 of a stored row without its checksum, as canonical JSON (field order and spacing do not matter).

    Computed from the row as stored, not from a re-dump of the model, so a later schema that adds a field with
    a default does not invalidate shards written before it."""
    body = {k: v for k, v in row.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def save_episodes(path: Path | str, episodes: list[Episode]) -> int:
    return write_jsonl(path, (e.model_dump(mode="json") for e in episodes))


def load_episodes(path: Path | str) -> list[Episode]:
    """Read episodes.jsonl; a bad row raises RecordError naming the file, the line and the field."""
    out: list[Episode] = []
    for lineno, obj in iter_jsonl(path):
        try:
            out.append(Episode.model_validate(obj))
        except ValidationError as exc:
            err = exc.errors()[0]
            raise RecordError(path, lineno, ".".join(str(p) for p in err["loc"]) or None, err["msg"]) from None
    return out
