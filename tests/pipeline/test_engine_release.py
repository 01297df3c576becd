"""A profile can give the run's vLLM engine's memory to each training stage: `pipeline.release_engine_for_training`
stops the engine before the stage trains, and the next collection starts it again. Runs the real launcher against
the fake `vllm` package of tests/policies/test_vllm.py (a real server process, no vLLM)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from components.policies.engines import VLLMServers
from components.policies.vllm import VLLMPolicyConfig
from tests.conftest import ROOT
from tests.policies.test_vllm import SMOLLM2, fake, fake_config  # noqa: F401  (fake is a fixture)


def _plan(tmp_path: Path, release: bool) -> Any:
    from flows.pipeline import load_plan

    raw = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    # a suite folder with no rollouts beside it: the training stage finds no episodes and stops
    raw["data"]["out_dir"] = str(tmp_path / "data" / "suite")
    raw["training"]["out_dir"], raw["training"]["data_dir"] = str(tmp_path / "models"), str(tmp_path / "training")
    raw.setdefault("pipeline", {})["release_engine_for_training"] = release
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_plan(str(path))


def _serving(engines: VLLMServers, fake: dict[str, Any]) -> Any:  # noqa: F811
    """A collection's policy on the run's engines, handed back as a collection does: its server, running."""
    policy = engines.policy(VLLMPolicyConfig.model_validate(fake_config(fake, model=str(fake["a"]), tokenizer=SMOLLM2)))
    policy.close()
    assert policy.server is not None and policy.server.running()
    return policy.server


@pytest.mark.parametrize("release", [True, False])
def test_a_training_stage_stops_the_runs_engine_only_where_the_profile_says(fake: dict[str, Any], tmp_path: Path,  # noqa: F811
                                                                             release: bool) -> None:
    from flows.pipeline import run_train

    plan = _plan(tmp_path, release)
    stage = next(s for s in plan.stages if s.name == "sft")
    with VLLMServers() as engines:
        server = _serving(engines, fake)
        with pytest.raises(FileNotFoundError, match="no episodes of rollout"):  # nothing to train on: the stage stops early
            run_train(plan, plan.cfg, stage, engines)
        assert server.running() is not release
        _serving(engines, fake)
        assert engines.starts == (2 if release else 1)  # released: the next collection starts the engine again


def test_evaluation_stops_the_runs_engine_before_it_scores(fake: dict[str, Any], tmp_path: Path) -> None:  # noqa: F811
    """Scoring reads the episodes on disk; the verifier's model, not an idle engine, gets the memory."""
    from flows.pipeline import run_evaluate

    plan = _plan(tmp_path, release=False)
    with VLLMServers() as engines:
        server = _serving(engines, fake)
        with pytest.raises(FileNotFoundError, match="no episodes of rollout"):  # it stops after the release
            run_evaluate(plan, plan.cfg, plan["evaluate"], engines)
        assert not server.running()
