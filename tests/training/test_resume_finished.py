"""A training run started again after it saved its last step trains no further step."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from components.training.config import LoraSettings, Schedule, SFTSettings
from components.training.data import sft_examples
from components.training.datasets import write_dataset
from components.training.trainers import TrainJob, train
from tests.training.conftest import text_episodes


def test_a_run_resumed_from_its_final_checkpoint_takes_no_step_more(tiny_model, tiny_chat, tmp_path):
    data = tmp_path / "data"
    write_dataset(data, "sft", sft_examples(text_episodes(12), tiny_chat), sources=[], tokenizer=str(tiny_model),
                  settings={})
    job = TrainJob(method="sft", base_model=str(tiny_model), dataset_dir=data, out_dir=tmp_path / "run",
                   sft=SFTSettings(packing=False, lora=LoraSettings(r=4, alpha=8, dropout=0.0),
                                   schedule=Schedule(max_steps=2, batch_size=1, grad_accum=2, max_length=512,
                                                     logging_steps=1, save_steps=2, precision="fp32")))
    first = train(job)
    assert first.global_step == 2 and (job.out_dir / "checkpoint-2").is_dir()
    again = train(job)
    assert again.resumed_from is not None and again.resumed_from.endswith("checkpoint-2")
    assert again.global_step == 2, f"resuming a finished run trained on to step {again.global_step}"
    assert not (job.out_dir / "checkpoint-3").exists()
    # the model it saves is the checkpoint's, loaded, not the adapter as initialized
    saved = load_file(str(job.out_dir / "checkpoint-2" / "adapter_model.safetensors"))
    final = load_file(str(job.out_dir / "final" / "adapter_model.safetensors"))
    assert set(saved) == set(final) and all(torch.equal(saved[k], final[k]) for k in saved)
    assert any(v.any() for k, v in final.items() if "lora_B" in k)
    assert again.train_loss == pytest.approx(first.train_loss, rel=1e-4)  # the mean of the steps it took
