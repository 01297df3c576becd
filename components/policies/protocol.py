"""What a policy is: given the conversations waiting for the model, the next assistant message of each.

One call takes a whole batch (every live episode that waits for the model), so a backend can batch across
episodes (hf), send them concurrently (openai, vllm) or answer at once (scripted). Token backends get and
return exact token ids: the caller keeps each episode's context as ids (components.policies.tokens) and a
backend never tokenizes chat text again. Backends are registered by name (components.policies.registry).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from components.envs.episode import Sampling
from components.tasks.record import Task

FinishReason = Literal["stop", "length", "error"]


@dataclass
class GenerationRequest:
    key: str  # the episode's id: a backend may keep per-episode state under it (see `memory`)
    messages: list[dict[str, str]]  # the chat so far: system, the task, then assistant/observation turns
    sampling: Sampling
    prompt_token_ids: list[int] | None = None  # the exact context, for backends with `uses_tokens`
    # what is being played (a coding Task, a DiagGym Case); only scripted policies read it (the teacher, the DiagGym
    # oracle): a model sees `messages` alone. Untyped: this layer may not import DiagGym's records
    task: Task | Any | None = None
    memory: dict[str, Any] = field(default_factory=dict)  # per-episode state the backend owns across turns

    @property
    def turn_seed(self) -> int:
        """The seed of this turn's draws: the episode's seed and the turn index, so that a multi-turn episode does
        not replay its first draws on every turn (hf and vllm draw the same way)."""
        return self.sampling.seed * 1_000_003 + len(self.messages)


@dataclass
class Generation:
    text: str
    token_ids: list[int] | None = None  # exactly as sampled (token backends)
    logprobs: list[float] | None = None  # one per token in token_ids, from the model's raw distribution
    finish_reason: FinishReason = "stop"
    model_time_s: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)  # recorded in Turn.metadata (e.g. a teacher's mistake)


# what servers say when a prompt (plus max_tokens) is over the context: vLLM "This model's maximum context length
# is 2048 tokens" / "max_model_len"; OpenAI code "context_length_exceeded"; SGLang "... maximum context length";
# others "context window"
CONTEXT_ERROR = re.compile(r"context[ _]length|maximum context|context window|max_model_len", re.IGNORECASE)


def context_exceeded(reason: str, model_time_s: float = 0.0) -> Generation:
    """The reply to a request whose context is full: the scheduler ends that episode as context_limit."""
    return Generation(text="", token_ids=[], logprobs=[], finish_reason="length", model_time_s=model_time_s,
                      metadata={"context_exceeded": True, "error": reason[:300]})


def is_context_exceeded(gen: Generation) -> bool:
    return bool(gen.metadata.get("context_exceeded"))


class PolicyRefusal(ValueError):
    """The policy cannot play this task at all (e.g. the scripted teacher without a reference solution)."""


@runtime_checkable
class Policy(Protocol):
    backend: str  # "hf", "vllm", "openai", "scripted"
    model_id: str
    uses_tokens: bool  # True: requests carry prompt_token_ids and generations return token_ids
    max_context: int | None  # the model's context in tokens (None: the backend does not say)

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]: ...

    def close(self) -> None: ...

