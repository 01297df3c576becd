"""configs/diag-paper.yaml: DiagGym's GPU profile loads through the config loader and its dry run shows the plan,
with the 7B checkpoint folder, the LM world model and the GRPO sizes of one 8-GPU node."""

from __future__ import annotations

from components.profile.config import load_config
from flows.pipeline import pipeline_flow
from flows.serve import needs_gpu


def test_the_diag_paper_profile_loads_and_plans_a_7b_agent_with_the_lm_world_model():
    cfg = load_config("diag-paper")
    d = cfg.diag
    assert d is not None and d.base_model == "checkpoints/Qwen2.5-7B-Instruct" and d.dtype == "bfloat16"
    assert d.world.lm.enabled and needs_gpu(cfg)
    g = d.grpo.settings
    assert g.episodes_per_step == 64 and g.max_turns == d.env.max_turns == 12 and g.precision == "bf16"

    result = pipeline_flow.fn(profile="diag-paper", dry_run=True)
    rows = {r["stage"]: r for r in result["stages"]}
    assert list(rows) == ["cohort", "world", "cold_start", "grpo", "evaluate", "register"]
    assert rows["world"]["what"] == "world-model card: recorded, statistical, LM (checkpoints/Qwen2.5-7B-Instruct)"
    assert rows["cold_start"]["what"] == "SFT of checkpoints/Qwen2.5-7B-Instruct on oracle trajectories"
    assert rows["grpo"]["steps"] == 300 and rows["grpo"]["episodes_per_step"] == 64
    assert "medgym-diag-world-paper" in rows["register"]["what"]
    assert "estimate" not in result  # the cost model sizes coding stages only
