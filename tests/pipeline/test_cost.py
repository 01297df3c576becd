"""The cost model (components/pipeline/cost.py): a small profile's estimate against the same arithmetic done by hand,
the dry run's last line through the real CLI, a profile missing a size refused by name, and the assumptions file
that each figure states its source."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml

from components.common.io import RecordError
from components.pipeline.cost import RATES_FILE, Assumptions, CostError, estimate, load_assumptions
from components.pipeline.plan import build_plan
from components.profile.config import PipelineConfig
from tests.conftest import ROOT

MEDGYM = [sys.executable, "-c", "from flows.cli import main; main()"]


def _figure(value: float) -> dict:
    return {"value": value, "unit": "u", "source": "the test"}


# round figures, so that the hand arithmetic below reads off them
ASSUMED = {
    "rates": {"generate_tokens_per_s_per_gpu": _figure(10), "prefill_tokens_per_s_per_gpu": _figure(100),
              "train_tokens_per_s_per_gpu": _figure(100), "score_tokens_per_s_per_gpu": _figure(1000),
              "dpo_reference_factor": _figure(1.25), "sandbox_steps_per_s_per_worker": _figure(1),
              "engine_start_s": _figure(36), "train_stage_overhead_s": _figure(72)},
    "workload": {"turns_fraction": _figure(0.5), "new_tokens_fraction": _figure(0.5), "prompt_tokens": _figure(100),
                 "observation_tokens_per_turn": _figure(50), "success_fraction": _figure(0.5),
                 "pair_fraction": _figure(0.5), "verifier_examples_fraction": _figure(1.0)},
    "datasets": {"medagentgym": {"train": _figure(1000)}},
}


def _profile(tmp_path, **data) -> dict:
    return {
        "profile": "tiny-gpu",
        "data": {"source": "generate", "suite": "demo", "out_dir": str(tmp_path / "none"),
                 "suites": {"demo": {"train_per_category": 10, "test_per_category": 5}}, **data},
        "env": {"max_turns": 10},
        "rollouts": {"base_train": {"policy": {"backend": "scripted"}, "plan": {"k": 2, "max_new_tokens": 100},
                                    "split": "train", "categories": ["gc_content", "reverse_complement"],
                                    "workers": 2}},
        "training": {"sft": {"episodes": ["base_train"], "schedule": {"epochs": 2, "max_length": 512}},
                     "distributed": {"processes": 2}},
        "pipeline": {"stages": ["suite", "base_train", "sft"]},
    }


def test_a_small_profile_costs_what_the_hand_arithmetic_says(tmp_path):
    plan = build_plan(PipelineConfig.model_validate(_profile(tmp_path)))
    est = estimate(plan, None, Assumptions.model_validate(ASSUMED))
    by = {s.stage: s for s in est.stages}
    # 2 categories x 10 train tasks x k 2 = 40 episodes of 5 turns (10 x 0.5), 50 new tokens a turn (100 x 0.5);
    # an episode is 100 + 5 x (50 + 50) = 600 tokens
    generate = 40 * 5 * 50 / 10 + 40 * (100 + 5 * 50) / 100  # decode + prefill: 1,140 GPU-seconds on one engine
    assert by["base_train"].gpus == 1
    assert by["base_train"].wall_hours == pytest.approx((generate + 36) / 3600)  # sandboxes: 40 x 5 / 2 = 100 s
    assert by["base_train"].gpu_hours == pytest.approx((generate + 36) / 3600)
    # SFT: half the episodes pass, each 512 tokens (max_length caps 600), two epochs, on 2 processes
    train = 40 * 0.5 * 512 * 2 / 100
    assert by["sft"].gpu_hours == pytest.approx((train + 72 * 2) / 3600)
    assert by["sft"].wall_hours == pytest.approx((train / 2 + 72) / 3600)
    assert by["suite"].gpu_hours == 0
    assert est.wall_hours == pytest.approx((generate + 36 + train / 2 + 72) / 3600)
    assert est.line() == f"estimated: {est.gpu_hours:,.0f} GPU-hours, {est.wall_hours:.1f} h wall on 2 GPUs"


def test_the_sandboxes_set_a_rollouts_wall_time_when_they_are_the_slower(tmp_path):
    raw = _profile(tmp_path)
    raw["rollouts"]["base_train"]["workers"] = 1
    slow = {**ASSUMED, "rates": {**ASSUMED["rates"], "sandbox_steps_per_s_per_worker": _figure(0.1)}}
    est = estimate(build_plan(PipelineConfig.model_validate(raw)), None, Assumptions.model_validate(slow))
    assert est.stages[1].wall_hours == pytest.approx((40 * 5 / 0.1 + 36) / 3600)
    assert "sandboxes are slower" in est.stages[1].note


def test_a_split_whose_size_nothing_gives_is_refused_by_rollout_and_split(tmp_path):
    raw = _profile(tmp_path, source="medagentgym", import_from=str(tmp_path / "release"))
    raw["rollouts"]["base_train"]["split"] = "valid"
    raw["rollouts"]["base_train"].pop("categories")
    raw["training"] = {"distributed": {"processes": 2}}
    raw["pipeline"]["stages"] = ["suite", "base_train"]
    plan = build_plan(PipelineConfig.model_validate(raw))
    with pytest.raises(CostError, match=r"rollouts\.base_train plays split valid of data source 'medagentgym'"):
        estimate(plan, None, Assumptions.model_validate(ASSUMED))


def test_every_shipped_assumption_names_its_source_and_a_missing_one_is_refused(tmp_path):
    shipped = load_assumptions()
    assert all(a.source.strip() for a in [*shipped.rates.__dict__.values(), *shipped.workload.__dict__.values()])
    raw = yaml.safe_load(RATES_FILE.read_text())
    del raw["rates"]["train_tokens_per_s_per_gpu"]["source"]
    bad = tmp_path / "rates.yaml"
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(RecordError, match="rates.train_tokens_per_s_per_gpu.source"):
        load_assumptions(bad)


def _dry_run(tmp_path, raw: dict) -> subprocess.CompletedProcess:
    path = tmp_path / "tiny-gpu.yaml"
    path.write_text(yaml.safe_dump(raw))
    return subprocess.run([*MEDGYM, "pipeline", "run", "--profile", str(path), "--dry-run"], capture_output=True,
                          text=True, timeout=600, cwd=ROOT)


def test_the_dry_run_ends_with_the_estimate_and_refuses_a_missing_size_in_one_line(tmp_path):
    raw = _profile(tmp_path)
    proc = _dry_run(tmp_path, raw)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = estimate(build_plan(PipelineConfig.model_validate(raw)), None).line()
    assert proc.stdout.rstrip().splitlines()[-1] == expected
    assert re.fullmatch(r"estimated: [\d,]+ GPU-hours, [\d.]+ h wall on 2 GPUs", expected)

    raw = _profile(tmp_path, source="medagentgym", import_from=str(tmp_path / "release"))
    raw["rollouts"]["base_train"]["split"] = "valid"
    raw["rollouts"]["base_train"].pop("categories")
    raw["training"] = {"distributed": {"processes": 2}}
    raw["pipeline"]["stages"] = ["suite", "base_train"]
    refused = _dry_run(tmp_path, raw)
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "rollouts.base_train plays split valid" in refused.stderr and "Traceback" not in refused.stderr
