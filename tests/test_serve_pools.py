"""Which work pool a profile's scheduled runs go to (flows.serve.work_pool_for): GPU runs apart from CPU ones, so that
a CPU worker never takes a run that needs GPUs. Decided from the profile; `pipeline.gpu` says so outright."""

from __future__ import annotations

import pytest

from components.profile.config import PipelineConfig, load_config
from flows.serve import GPU_WORK_POOL, WORK_POOL, needs_gpu, work_pool_for


@pytest.mark.parametrize(("profile", "pool"), [("paper", GPU_WORK_POOL), ("demo", WORK_POOL), ("smoke", WORK_POOL),
                                               ("diag-demo", WORK_POOL)])
def test_the_shipped_profiles_go_to_the_pool_their_training_needs(profile: str, pool: str) -> None:
    assert work_pool_for(load_config(profile)) == pool


def test_several_training_processes_or_deepspeed_need_gpus_unless_the_profile_says_otherwise() -> None:
    def cfg(distributed: dict, gpu: bool | None = None) -> PipelineConfig:
        return PipelineConfig.model_validate({"profile": "p", "training": {"distributed": distributed},
                                              "pipeline": {"gpu": gpu}})

    assert not needs_gpu(cfg({}))
    assert needs_gpu(cfg({"processes": 2}))
    assert needs_gpu(cfg({"deepspeed": "zero2"}))
    assert not needs_gpu(cfg({"processes": 2}, gpu=False))  # e.g. a CPU run of several gloo processes
    assert needs_gpu(cfg({}, gpu=True))  # e.g. a single-GPU profile
