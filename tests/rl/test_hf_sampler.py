"""GRPO's hf sampler (components/rl/hf_sampler.py): a plain copy of the trainer's model that holds the trainer's
weights of the current optimizer step, LoRA merged in, and leaves the trainer's own weights as they were."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from components.rl.hf_sampler import SamplerCopy, sampling_dtype


def _trainer(tiny_model):
    from accelerate import Accelerator
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32),
                           LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0))
    return SimpleNamespace(accelerator=Accelerator(cpu=True), model=model, state=SimpleNamespace(global_step=0))


def _train(model) -> None:
    with torch.no_grad():  # an optimizer step's worth of change to the adapter
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(torch.randn_like(p) * 0.05)


def test_the_sampler_holds_the_trainers_merged_weights_of_each_step(tiny_model):
    trainer = _trainer(tiny_model)
    model = trainer.model
    _train(model)
    ids = torch.randint(0, 100, (2, 12))
    live_before = {n: p.detach().clone() for n, p in model.named_parameters()}

    sampler = SamplerCopy("fp32")
    plain = sampler.current(trainer)
    assert not hasattr(plain, "peft_config") and not plain.training
    with torch.no_grad():
        expected = model(ids).logits
        assert torch.allclose(plain(ids).logits, expected, atol=1e-5)
    # the trainer's weights are untouched: the adapter was added aside, not merged in and out
    assert all(torch.equal(p, live_before[n]) for n, p in model.named_parameters())

    _train(model)  # the same step: the copy is not made again
    assert sampler.current(trainer) is plain
    with torch.no_grad():
        assert torch.allclose(plain(ids).logits, expected, atol=1e-5)
    trainer.state.global_step = 1  # a new step: the copy follows the trainer
    assert sampler.current(trainer) is plain
    with torch.no_grad():
        now = model(ids).logits
        assert not torch.allclose(now, expected, atol=1e-3)
        assert torch.allclose(plain(ids).logits, now, atol=1e-5)


def test_it_samples_in_the_precision_the_trainer_computes_in(tiny_model):
    assert sampling_dtype("fp32") == torch.float32 and sampling_dtype("bf16") == torch.bfloat16
    sampler = SamplerCopy("bf16")
    plain = sampler.current(_trainer(tiny_model))
    assert {p.dtype for p in plain.parameters()} == {torch.bfloat16}
