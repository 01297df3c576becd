"""A real 2-process DeepSpeed ZeRO-2 SFT run on CPU through `accelerate launch`, the command GPU nodes use."""

from __future__ import annotations

import json
import random

import pytest

from components.training.config import LoraSettings, Schedule, SFTSettings
from components.training.data import SFTExample
from components.training.datasets import write_dataset
from components.training.stage import launch
from components.training.trainers import TrainJob

pytestmark = pytest.mark.slow


def _rows(n: int, seed: int = 0) -> list[SFTExample]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        length = rng.randint(24, 120)  # mixed lengths, as episodes are
        prompt = rng.randint(8, length // 2)
        ids = [rng.randrange(1, 2000) for _ in range(length)]
        rows.append(SFTExample(f"e{i}", f"t{i}", "calculator", ids, [0] * prompt + [1] * (length - prompt)))
    return rows


@pytest.mark.timeout(900)
def test_zero2_two_processes_take_the_same_steps_and_save_a_loadable_model(tiny_model, tmp_path):
    data = tmp_path / "data"
    write_dataset(data, "sft", _rows(32), sources=[], tokenizer=str(tiny_model), settings={})
    steps = 4
    job = TrainJob(method="sft", base_model=str(tiny_model), dataset_dir=data, out_dir=tmp_path / "run",
                   sft=SFTSettings(packing=True, lora=LoraSettings(enabled=False),
                                   schedule=Schedule(max_steps=steps, batch_size=2, max_length=256, logging_steps=1,
                                                     save_steps=100, precision="fp32")))
    result = launch(job, processes=2, deepspeed="zero2", log_to=tmp_path / "launch.log")

    assert result.processes == 2
    ranks = [json.loads((job.out_dir / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [r["global_step"] for r in ranks] == [steps, steps]
    assert result.global_step == steps and result.tokens > 0
    losses = [e["loss"] for e in result.log_history if "loss" in e]
    assert len(losses) == steps and all(x == x for x in losses)  # finite, one per step

    import torch
    from transformers import AutoModelForCausalLM

    before = AutoModelForCausalLM.from_pretrained(tiny_model)
    after = AutoModelForCausalLM.from_pretrained(result.final_dir)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    assert torch.isfinite(after(input_ids=ids).logits).all()
    changed = [n for (n, p), (_, q) in zip(before.named_parameters(), after.named_parameters(), strict=True)
               if not torch.equal(p, q)]
    assert changed, "ZeRO-2 training changed no weight"
