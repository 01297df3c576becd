"""The LM head of a one-process CPU training run, through PyTorch's own kernels, scored at labelled positions only.

TRL's trainers score through a fused, chunked head (`trl.trainer.utils.add_fused_lm_head`) that never materialises
the logits of a long batch. On a GPU its Triton kernel scores only the labelled positions. Elsewhere it scores
every position of the row, each vocabulary chunk in an eager elementwise pass, its backward in float32: in the demo's
SFT that head was about half of every step (py-spy), for rows whose loss reads a third of their positions, and a
verifier row's loss reads one. On a CPU the few labelled positions' logits fit in memory, so they are computed
directly: the logits in the autocast dtype, as TRL's head computes them, the softmax in float32.
"""

from __future__ import annotations

import functools
import types
from typing import Any

# config fields of a head that does more than a matmul (TRL's fused head applies them); such a model keeps TRL's head
HEAD_SCALING = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier",
                "logits_scaling")


def head_log_probs(hidden: Any, weight: Any, bias: Any, targets: Any, mask: Any, temperature: float,
                   entropy: bool) -> tuple[Any, Any]:
    """Log-probs of `targets` (n, w) from the last hidden states (n, w, d) at the positions `mask` keeps (0
    elsewhere), and their entropies (detached: logged, never trained)."""
    fields = head_fields(hidden, weight, bias, targets, mask, temperature, ("log_probs", "entropy") if entropy
                         else ("log_probs",))
    return fields["log_probs"], fields.get("entropy")


def head_fields(hidden: Any, weight: Any, bias: Any, targets: Any, mask: Any, temperature: float,
                outputs: tuple[str, ...]) -> dict[str, Any]:
    """The per-position fields of TRL's fused head (`log_probs` with its gradient; `entropy`, `is_top1`,
    `mean_logits`, `log_sum_sq_probs` detached, as its trainers log them), at the positions `mask` keeps, 0
    elsewhere."""
    import torch
    from torch.nn import functional

    z = functional.linear(hidden[mask], weight, bias).float() / temperature
    norm = torch.logsumexp(z, dim=-1)
    picked = targets[mask]
    out = {"log_probs": z.gather(-1, picked.unsqueeze(-1)).squeeze(-1) - norm}
    with torch.no_grad():
        if "entropy" in outputs:
            out["entropy"] = norm - (torch.softmax(z, dim=-1) * z).sum(-1)
        if "is_top1" in outputs:
            out["is_top1"] = z.argmax(-1) == picked
        if "mean_logits" in outputs:
            out["mean_logits"] = z.mean(-1)
        if "log_sum_sq_probs" in outputs:
            out["log_sum_sq_probs"] = torch.logsumexp(2 * (z - norm.unsqueeze(-1)), dim=-1)
    return {name: value.new_zeros(mask.shape).masked_scatter(mask, value) for name, value in out.items()}


def cpu_head_applies(accelerator: Any, causal: Any) -> bool:
    """Whether a run scores through `head_fields`: one CPU process (a multi-process run goes through the wrapper
    that syncs its gradients, and a GPU's fused kernel is compact already) and a head that is a plain matmul."""
    if accelerator.device.type != "cpu" or accelerator.num_processes > 1:
        return False
    text = causal.config.get_text_config()
    return all(getattr(text, name, None) is None for name in HEAD_SCALING)


def use_cpu_head(trainer: Any, outputs: tuple[str, ...]) -> bool:
    """Re-patch the fused head TRL added to a trainer's model (`model(..., fused_lm_head=True)`) so that it scores
    through `head_fields`, where `cpu_head_applies`. Returns whether it did."""
    model = trainer.model
    causal = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not cpu_head_applies(trainer.accelerator, causal):
        return False
    from trl.trainer.utils import FusedCausalLMOutput

    original = type(causal).forward

    @functools.wraps(original)
    def forward(self: Any, *args: Any, fused_lm_head: bool = False, labels: Any = None, shift_labels: Any = None,
                num_items_in_batch: Any = None, **kwargs: Any) -> Any:
        if not fused_lm_head:  # generation and any caller that wants the logits: the model's own forward
            extra = {k: v for k, v in (("labels", labels), ("shift_labels", shift_labels),
                                       ("num_items_in_batch", num_items_in_batch)) if v is not None}
            return original(self, *args, **kwargs, **extra)
        kwargs["use_cache"] = False
        hidden = self.base_model(*args, **kwargs).last_hidden_state
        if shift_labels is None:
            hidden, labels = hidden[:, :-1], labels[:, 1:]
        else:
            labels = shift_labels
        mask = labels != -100
        head = self.get_output_embeddings()
        fields = head_fields(hidden, head.weight, head.bias, labels.clamp(min=0), mask, 1.0, outputs)
        count = mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
        return FusedCausalLMOutput(loss=-fields["log_probs"].sum() / count, label_mask=mask, **fields)

    causal.forward = types.MethodType(forward, causal)
    return True
