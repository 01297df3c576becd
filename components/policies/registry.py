"""Policies by name: the profile and the command line say `hf`, `vllm`, `openai` or `scripted`; this builds it.

Each backend registers its config class and its constructor; backends import lazily, so choosing the scripted
teacher never imports torch and choosing hf never needs the vLLM environment.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from components.policies.protocol import Policy
from components.tasks.record import Task

Backend = Literal["hf", "vllm", "openai", "scripted"]

# backend -> (module, config class, policy class or factory taking the config)
_REGISTRY: dict[str, tuple[str, str, str]] = {
    "hf": ("components.policies.hf", "HFConfig", "HFPolicy"),
    "vllm": ("components.policies.vllm", "VLLMPolicyConfig", "VLLMPolicy"),
    "openai": ("components.policies.openai_compat", "OpenAIConfig", "OpenAIPolicy"),
    "scripted": ("components.policies.scripted", "ScriptedConfig", "ScriptedTeacher"),
}


def _parts(backend: str) -> tuple[type[BaseModel], Any]:
    module, config_name, policy_name = _REGISTRY[backend]
    mod = importlib.import_module(module)
    return getattr(mod, config_name), getattr(mod, policy_name)


class PolicyConfig(BaseModel):
    """`backend` plus that backend's options (validated against its own config class when loaded)."""

    model_config = ConfigDict(extra="forbid")

    backend: Backend = "scripted"
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_options(self) -> PolicyConfig:
        config_cls, _ = _parts(self.backend)
        config_cls.model_validate(self.options)
        return self

    def backend_config(self) -> BaseModel:
        config_cls, _ = _parts(self.backend)
        return config_cls.model_validate(self.options)

    def with_options(self, **overrides: Any) -> PolicyConfig:
        """A copy with options set (None values are left out: an unset command-line flag keeps the profile's)."""
        merged = {**self.options, **{k: v for k, v in overrides.items() if v is not None}}
        return PolicyConfig(backend=self.backend, options=merged)


def refusal(config: PolicyConfig) -> Callable[[Task], str | None] | None:
    """The backend's `refuse(task)` (a static method: why it cannot play a task), or None if it plays any task.
    Asked before any policy is built, so a Ray driver never loads a model just to know what to hand out."""
    _, policy_cls = _parts(config.backend)
    return getattr(policy_cls, "refuse", None)


def build_policy(config: PolicyConfig) -> Policy:
    _, policy_cls = _parts(config.backend)
    return policy_cls(config.backend_config())
