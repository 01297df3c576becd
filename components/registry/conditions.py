"""The conditions of an evaluation: what changes a score other than the model, as one flat mapping, and how two
evaluations' conditions differ.

A coding rollout's are read off its episodes, which record the environment settings they ran under and how the
model sampled: `k` (samples per task), `first_temperature` (sample 0) and `temperature` (samples 1..k-1), `top_p`,
`max_new_tokens`, every environment setting (`max_turns`, `exec_timeout_s`, `stateful`, ...), and the `split` of the
tasks played. The policy's model is what a comparison compares, so it is never a condition; sampling seeds are left
out too (another seed is another draw under the same conditions). A DiagGym evaluation's come from its profile
(flows/diag_pipeline.py). A rollout resumed under other settings holds several values of one condition: the
condition is their sorted list, which equals no single value.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from components.envs.episode import Episode
from components.registry.evaluation import Condition
from components.tracking.tracker import flatten

_ABSENT = object()


def as_conditions(section: Mapping[str, Any]) -> dict[str, Any]:
    """Nested settings as flat conditions (`reward.correct`, components.tracking.tracker.flatten); a list becomes
    its JSON text, so that a condition's values can be collected in a set and compared as one value."""
    return {k: json.dumps(v) if isinstance(v, list) else v for k, v in flatten(section).items()}


def _value(values: set[Any]) -> Condition:
    if len(values) == 1:
        return next(iter(values))
    return sorted(values, key=lambda v: (str(type(v)), str(v)))


def rollout_conditions(episodes: Sequence[Episode], splits: Mapping[str, str]) -> dict[str, Condition]:
    """The conditions `episodes` (one rollout) were played under; `splits` maps each task id to its split."""
    if not episodes:
        raise ValueError("rollout_conditions: no episodes")
    seen: dict[str, set[Any]] = defaultdict(set)
    for e in episodes:
        for k, v in as_conditions(e.env_config).items():
            seen[k].add(v)
        if e.policy is not None:
            s = e.policy.sampling
            seen["first_temperature" if e.sample_index == 0 else "temperature"].add(s.temperature)
            seen["top_p"].add(s.top_p)
            seen["max_new_tokens"].add(s.max_new_tokens)
        seen["split"].add(splits[e.task_id])
    return {"k": max(e.sample_index for e in episodes) + 1, **{k: _value(v) for k, v in sorted(seen.items())}}


def _show(v: Any) -> str:
    return "absent" if v is _ABSENT else json.dumps(v)


def differences(candidate: Mapping[str, Any], reference: Mapping[str, Any]) -> list[str]:
    """'<name> <candidate's> vs <reference's>' for every condition the two do not share."""
    return [f"{k} {_show(candidate.get(k, _ABSENT))} vs {_show(reference.get(k, _ABSENT))}"
            for k in sorted(set(candidate) | set(reference)) if candidate.get(k, _ABSENT) != reference.get(k, _ABSENT)]
