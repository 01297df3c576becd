"""Long contexts: the paper profile generates in 16k, and Liger's kernels are a profile option the trainer receives
or refuses by name."""

from __future__ import annotations

import pytest

from components.pipeline.plan import build_plan
from components.profile.config import load_config
from components.training.config import LoraSettings, Schedule, SFTSettings
from components.training.trainers import TrainJob, build_trainer, kernel_args


def test_every_paper_engine_holds_a_16k_episode():
    plan = build_plan(load_config("paper"))
    engines = {name: r.policy.options.get("max_model_len") for name, r in plan.cfg.rollouts.items()}
    assert {"base_train", "base_test", "sft_test", "dpo_test", "round1_train", "round2_test"} <= set(engines)
    assert set(engines.values()) == {16384}, engines  # the self-improvement rounds' engines too
    env = plan.cfg.env
    # the context is sized for the episode it caps: every turn's reply fits beside the rest
    assert env.max_turns * plan.cfg.rollouts["base_train"].plan.max_new_tokens <= 16384


def test_the_paper_profile_asks_for_liger_kernels_and_keeps_one_checkpoint():
    cfg = load_config("paper")
    assert cfg.training.distributed.liger_kernels and cfg.training.checkpoints.keep == "last"
    assert cfg.tracking.log_model == "reference"


def _job(tiny_model, tmp_path, liger: bool) -> TrainJob:
    return TrainJob(method="sft", base_model=str(tiny_model), dataset_dir=tmp_path, out_dir=tmp_path / "run",
                    liger_kernels=liger, sft=SFTSettings(lora=LoraSettings(enabled=False),
                                                         schedule=Schedule(max_steps=1, precision="fp32")))


def test_liger_is_refused_by_name_where_the_library_is_missing(tiny_model, tmp_path):
    import importlib.util

    if importlib.util.find_spec("liger_kernel") is not None:
        pytest.skip("liger-kernel is installed here")
    rows = [{"input_ids": [1, 2, 3, 4], "loss_mask": [0, 1, 1, 1]}]
    with pytest.raises(ValueError, match=r"^training\.distributed\.liger_kernels is true, and the liger-kernel "
                                         r"package is not installed"):
        build_trainer(_job(tiny_model, tmp_path, liger=True), rows, [])
    assert kernel_args(False) == {}


def test_liger_without_a_gpu_is_refused_by_name(tmp_path, monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    # a package named liger_kernel on the path: the library is found, and the missing GPU is what is refused
    (tmp_path / "liger_kernel").mkdir()
    (tmp_path / "liger_kernel" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"^training\.distributed\.liger_kernels is true, and no CUDA GPU"):
        kernel_args(True)


def test_the_profile_option_reaches_the_trainer_of_a_stage(tiny_model, tmp_path):
    """From the profile's training.distributed to the TrainingArguments a stage's trainer is built with: on this
    machine (no liger-kernel, no GPU) the stage stops there, by name, before any step."""
    from components.pipeline.paths import init_model, stage_dirs
    from components.profile.config import PipelineConfig
    from components.training import stage
    from tests.training.conftest import build_dataset, text_episodes, write_rollout
    from tests.training.test_stage import config

    raw = config(tmp_path, tiny_model, write_rollout(tmp_path / "rollout", text_episodes(2))).model_dump(mode="json")
    raw["training"]["distributed"] = {"liger_kernels": True}
    cfg = PipelineConfig.model_validate(raw)
    build_dataset(cfg, "sft")
    with pytest.raises(ValueError, match=r"^training\.distributed\.liger_kernels is true"):
        stage.run_stage(cfg, "sft", stage_dirs(cfg, "sft"), init_model(cfg, "sft"), log_model=False)
    assert not list(stage_dirs(cfg, "sft").run.glob("checkpoint-*"))
