"""The Evaluation record: a model's held-out scores task by task, what each task held, and under which conditions.

A promotion pairs two evaluations task by task. A task id alone does not say which task it was (ids are positional:
a suite or cohort rebuilt with another seed or size reuses them for other tasks), so an evaluation keeps each task's
content hash (components.registry.content), and the conditions that change a score other than the model (samples
per task, sampling, turn and token limits, environment settings, split, world seed: components.registry.conditions).
Versions registered before these were recorded read back with `task_hashes` and `conditions` None: unknown, so
never paired.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DEFAULT_METRIC = "success"  # what versions registered before the metric was named were evaluated on

# a condition's value: a flat JSON scalar, or the distinct values a rollout mixed
Condition = str | int | float | bool | None | list[str | int | float | bool | None]


class Evaluation(BaseModel):
    """A model's held-out evaluation, task by task: what a promotion is decided on."""

    model_config = ConfigDict(extra="forbid")

    task_success: dict[str, float] = Field(description="task id -> its score on `metric`, in [0, 1]: by default the "
                                                       "share of its finished episodes that are correct")
    metric: str = Field(default=DEFAULT_METRIC, min_length=1,
                        description="what `task_success` measures per task; only evaluations on the same metric are "
                                    "compared")
    task_hashes: dict[str, str] | None = Field(default=None, description="task id -> sha256 of the task's content "
                                               "(None: not recorded, so no task can be matched by content)")
    conditions: dict[str, Condition] | None = Field(default=None, description="what the tasks were played under, "
                                                    "flat (None: not recorded)")
    reference: str | None = Field(default=None, description="where the episodes are: a rollout folder, a report")
    scores: dict[str, float] = Field(default_factory=dict, description="summary figures to tag, e.g. pass@1")

    @field_validator("task_success")
    @classmethod
    def _in_unit_interval(cls, v: dict[str, float]) -> dict[str, float]:
        if not v:
            raise ValueError("an evaluation needs at least one task")
        bad = {t: s for t, s in v.items() if not 0.0 <= s <= 1.0}
        if bad:
            raise ValueError(f"success must lie in [0, 1]; {len(bad)} task(s) do not, e.g. {next(iter(bad.items()))}")
        return v

    @model_validator(mode="after")
    def _a_hash_per_task(self) -> Evaluation:
        if self.task_hashes is not None and set(self.task_hashes) != set(self.task_success):
            odd = sorted(set(self.task_hashes) ^ set(self.task_success))
            raise ValueError(f"task_hashes must cover exactly the scored tasks; {len(odd)} differ, e.g. {odd[0]!r}")
        return self

    @property
    def success(self) -> float:
        return sum(self.task_success.values()) / len(self.task_success)
