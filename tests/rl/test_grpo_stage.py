"""The coding profile's `grpo` stage in the plan: after the suite and the stage it starts from, keyed on its settings,
the environment and the sandbox, played by the rollout that names it, and run by its runner."""

from __future__ import annotations

import pytest

from components.pipeline.kinds import kind_of
from components.pipeline.plan import PlanError, build_plan
from components.profile.config import PipelineConfig, load_config
from tests.pipeline.test_kinds import _keys


def smoke(**training: dict) -> PipelineConfig:
    raw = load_config("smoke").model_dump(mode="json", exclude_unset=True)
    raw["training"]["grpo"] = {**raw["training"]["grpo"], **training}
    return PipelineConfig.model_validate(raw)


def test_smoke_plans_grpo_after_sft_and_plays_its_model_on_test():
    from flows.pipeline import runner

    plan = build_plan(load_config("smoke"))
    stage = plan["grpo"]
    assert (stage.kind, stage.needs, stage.method) == ("grpo", ("suite", "sft"), "grpo")
    assert plan.names.index("sft") < plan.names.index("grpo") < plan.names.index("grpo_test")
    assert plan.cfg.rollouts["grpo_test"].policy.options["model"] == "models/smoke/grpo/merged"
    assert plan["grpo_test"].needs == ("suite", "grpo") and "grpo_test" in plan["evaluate"].needs
    # a trained policy like the others: a look at the test split, and the last offline policy is still the final one
    assert [p.stage.name for p in plan.policies()] == ["sft", "grpo", "dpo", "round1-sft", "round1-dpo"]
    assert plan.final()[0].name == "round1-dpo" and plan.test_reads() == 3
    kind = kind_of("grpo")
    assert kind.outs(plan, stage) == (plan.cfg.training.out_dir / "smoke" / "grpo" / "merged",)
    assert {"training.grpo", "env", "sandbox"} <= set(kind.params(plan, stage))
    shown = kind.details(plan, stage, None)
    assert (shown["steps"], shown["num_generations"], shown["episodes_per_step"]) == (2, 2, 4)
    assert runner("grpo").__module__ == "flows.grpo"


def test_a_profile_without_training_grpo_has_no_grpo_stage():
    raw = load_config("smoke").model_dump(mode="json", exclude_unset=True)
    del raw["training"]["grpo"]
    raw["rollouts"].pop("grpo_test")
    assert "grpo" not in build_plan(PipelineConfig.model_validate(raw)).names


def test_its_key_follows_its_settings_env_and_starting_stage_only():
    base = _keys(build_plan(load_config("smoke")))
    steps = _keys(build_plan(smoke(steps=3)))
    assert steps["grpo"] != base["grpo"] and steps["grpo_test"] != base["grpo_test"]
    assert steps["sft"] == base["sft"] and steps["round1-dpo"] == base["round1-dpo"]  # nothing else reruns
    raw = load_config("smoke").model_dump(mode="json", exclude_unset=True)
    raw["env"]["exec_timeout_s"] = 5
    assert _keys(build_plan(PipelineConfig.model_validate(raw)))["grpo"] != base["grpo"]
    raw = load_config("smoke").model_dump(mode="json", exclude_unset=True)
    raw["training"]["sft"]["schedule"]["max_steps"] = 3  # the model it starts from changes
    assert _keys(build_plan(PipelineConfig.model_validate(raw)))["grpo"] != base["grpo"]
    from_base = build_plan(smoke(init="base"))
    assert from_base["grpo"].needs == ("suite",)


@pytest.mark.parametrize("init", ["verifier", "grpo"])
def test_it_refuses_to_start_from_a_verifier_or_itself(init):
    with pytest.raises(PlanError, match=f"training.grpo.init is '{init}': GRPO starts from base, a policy stage"):
        build_plan(smoke(init=init))
