"""`medgym rollout`'s options as a CollectionConfig: the profile's collection (or the defaults) with every option the
user set, validated once they are all in, and a value the config refuses reported as the option that was typed.

The policy is built from `--policy` and its options together: a backend whose config requires an option (openai
needs a model and an endpoint) must not be validated before that option is applied.
"""

from __future__ import annotations

from typing import Any

import typer
from pydantic import ValidationError

from components.pipeline.plan import expand_rollouts
from components.policies.registry import PolicyConfig
from components.profile.config import PipelineConfig
from components.rollout.runner import CollectionConfig

POLICY_FIELDS = {"--model": "model", "--base-url": "base_url", "--api-key-env": "api_key_env"}
COLLECTION_FIELDS = {"--split": ("split",), "--limit": ("limit",), "--k": ("plan", "k"), "--workers": ("workers",),
                     "--max-in-flight": ("max_in_flight",), "--max-turns": ("env", "max_turns"),
                     "--ray-address": ("ray_address",), "--sandbox": ("sandbox_backend",)}
_OPTION_OF_POLICY_FIELD = {"backend": "--policy", **{field: option for option, field in POLICY_FIELDS.items()}}
_OPTION_OF_COLLECTION_FIELD = {loc: option for option, loc in COLLECTION_FIELDS.items()}


def base_collection(cfg: PipelineConfig, collection: str | None) -> CollectionConfig:
    """The profile's `rollouts.<collection>` as the pipeline plays it (a trained stage's model as its folder), or the
    defaults on the profile's sandbox and environment."""
    if collection is None:
        return CollectionConfig(sandbox_backend=cfg.sandbox.backend, limits=cfg.sandbox.limits, env=cfg.env)
    if collection not in cfg.rollouts:
        known = ", ".join(cfg.rollouts) or "none"
        raise typer.BadParameter(f"{collection!r} (profile {cfg.profile} has: {known})", param_hint="--collection")
    return expand_rollouts(cfg).collection(collection)


def policy_from_options(start: PolicyConfig, backend: str | None, options: dict[str, str | None]) -> PolicyConfig:
    """`start` (the collection's policy) when `backend` is None or the same, else a fresh config of `backend`; then
    `options` (keys are option names, None: not given) set on it."""
    name = backend or start.backend
    given = {POLICY_FIELDS[option]: value for option, value in options.items() if value is not None}
    try:
        return PolicyConfig(backend=name, options={**(start.options if name == start.backend else {}), **given})
    except ValidationError as exc:
        raise _policy_error(name, exc) from None


def collection_from_options(base: CollectionConfig, policy: PolicyConfig, options: dict[str, Any]) -> CollectionConfig:
    """`base` with `policy` and `options` (keys are option names, None: not given)."""
    raw = base.model_dump()
    raw["policy"] = policy.model_dump()
    for option, value in options.items():
        if value is not None:
            *parents, leaf = COLLECTION_FIELDS[option]
            node = raw
            for key in parents:
                node = node[key]
            node[leaf] = value
    try:
        return CollectionConfig.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(str(part) for part in err["loc"])
        raise typer.BadParameter(_message(err), param_hint=_OPTION_OF_COLLECTION_FIELD.get(loc, ".".join(loc))) from None


def _policy_error(backend: str, exc: ValidationError) -> typer.BadParameter:
    # the backend's config reports its fields by name; every field an option sets is named as that option
    errors = exc.errors()
    named = [(_OPTION_OF_POLICY_FIELD.get(str(e["loc"][-1]), f"policy option {e['loc'][-1]}"), e) for e in errors]
    missing = _in_option_order([option for option, e in named if e["type"] == "missing"])
    if missing:
        return typer.BadParameter(f"--policy {backend} needs {' and '.join(missing)}")
    refused = _in_option_order([option for option, e in named if e["type"] == "extra_forbidden"])
    if refused:
        return typer.BadParameter(f"--policy {backend} does not take {' or '.join(refused)}")
    option, err = named[0]
    return typer.BadParameter(_message(err), param_hint=option)


def _in_option_order(options: list[str]) -> list[str]:
    order = list(_OPTION_OF_POLICY_FIELD.values())
    return sorted(options, key=lambda o: order.index(o) if o in order else len(order))


def _message(err: Any) -> str:
    # short enough for one line of typer's error panel at 80 columns
    if err["type"] == "value_error":  # a validator's own words, without pydantic's prefix
        return str(err["ctx"]["error"])
    if err["type"] == "literal_error":
        choices = err["ctx"]["expected"].replace("'", "")
        return f"{err['input']!r} (choose {choices})"
    return err["msg"]
