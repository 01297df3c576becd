"""GRPO generating in the trainer's process (`generation: hf`): a plain copy of the model that samples with the
trainer's current weights.

The trainer's model is a peft model whose forward accelerate wraps in mixed-precision autocast: every call casts
every weight to bf16 and every LoRA layer adds two products of its own. A decoding step reads the whole model for a
few tokens, so sampling through it ran at about a third of the speed of the same model plain (bench/diag.py's
profile: 554 s of the trainer's generation against 153 s for the same episodes alone). The sampler is that plain
model in the precision the trainer computes in (bf16 where it trains in bf16), LoRA merged in
(engine_weights.merged_weights: the trainer's weights are never merged in place), its weights copied from the
trainer's once per optimizer step: one pass over the parameters, well under a second for SmolLM2 on a CPU.

It costs one more copy of the weights in that precision; `sampler_copy: false` samples through the trainer's own
model instead, where memory is short (a large model on one GPU).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from components.rl.engine_weights import merged_weights
from components.training.models import precision_flags


def sampling_dtype(precision: str) -> Any:
    """The dtype the trainer computes in for a `precision` knob (auto: bf16 where it is fast), which the sampler
    holds its weights in."""
    import torch

    flags = precision_flags(precision)
    return torch.bfloat16 if flags["bf16"] else torch.float16 if flags["fp16"] else torch.float32


class SamplerCopy:
    """A plain model beside the trainer's, loaded with the trainer's merged weights at each new optimizer step."""

    def __init__(self, precision: str):
        self.dtype = sampling_dtype(precision)
        self.model: Any = None
        self.step: int | None = None  # the optimizer step whose weights it holds

    def current(self, trainer: Any) -> Any:
        """The sampler, holding the weights of the trainer's current step (copied only when the step changed)."""
        from trl.distributed import DistributedBackend

        step = trainer.state.global_step
        if self.model is not None and self.step == step:
            return self.model
        model = trainer.accelerator.unwrap_model(trainer.model)
        with DistributedBackend(trainer.accelerator).gather_params(list(model.parameters())):
            if self.model is None:
                self.model = self._build(model, trainer.accelerator.device)
            self._load(merged_weights(model))
        self.step = step
        return self.model

    def _build(self, model: Any, device: Any) -> Any:
        from transformers import AutoModelForCausalLM
        from transformers.initialization import no_init_weights

        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        # built on a real device, not on meta: its computed buffers (rotary frequencies) must be right. Its weights
        # are left uninitialised (a random init of SmolLM2 took 1.5 s, against 0.01): `_load` overwrites every one
        # and refuses a load that leaves one out
        with no_init_weights():
            plain = AutoModelForCausalLM.from_config(base.config, dtype=self.dtype)
        plain.tie_weights()  # skipped with the init: a tied head is then one parameter, as in the trainer's model
        plain = plain.to(device)
        plain.eval()
        return plain

    def _load(self, weights: Iterator[tuple[str, Any]]) -> None:
        """Copy each merged weight as it comes: no second whole copy of the model in memory."""
        import torch

        own = dict(self.model.named_parameters())  # a tied head is one parameter here and in the trainer's model
        seen = set()
        with torch.no_grad():
            for name, tensor in weights:
                if name not in own:
                    raise RuntimeError(f"the trainer's model has a weight {name!r} the sampler does not")
                own[name].copy_(tensor)
                seen.add(name)
        if seen != set(own):
            raise RuntimeError(f"the trainer's model gave no value for the sampler's {sorted(set(own) - seen)[:5]}")
