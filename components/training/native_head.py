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


def use_cpu_head(trainer: Any, outputs: tuple[str, ...], pairs: bool = False) -> bool:
    """Re-patch the fused head TRL added to a trainer's model (`model(..., fused_lm_head=True)`) so that it scores
    through `head_fields`, where `cpu_head_applies`. Returns whether it did.

    `pairs`: the batches are DPO's, chosen rows then rejected rows, row i and row n + i one pair with a common
    prompt: each pair's unscored common prefix runs once (`paired_hidden`)."""
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
        # a recomputed (checkpointed) layer would append to the prefix's cache a second time
        checkpointed = self.training and getattr(self, "is_gradient_checkpointing", False)
        if pairs and shift_labels is None and not args and not checkpointed and _plain(kwargs):
            hidden = paired_hidden(self.base_model, kwargs["input_ids"], kwargs["attention_mask"], labels)
        else:
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


def _plain(inputs: dict[str, Any]) -> bool:
    """Ids and an attention mask, and nothing the paired forward would drop (PEFT passes its defaults, None and
    False); anything more (embeddings, position ids, attentions asked for) runs the batch whole."""
    return "input_ids" in inputs and "attention_mask" in inputs and all(
        v is None or v is False for k, v in inputs.items()
        if k not in ("input_ids", "attention_mask", "use_cache", "return_dict"))


def prefix_cache(run: Any, prefix: Any, copies: int, **kwargs: Any) -> Any:
    """The keys and values of one prefix (1, p), run once through `run` (a backbone, or a model with `kwargs` such as
    `logits_to_keep`), repeated for `copies` rows that continue it. Their graph is kept, so the gradient of every
    row's loss flows back through the prefix's one pass."""
    cache = run(input_ids=prefix, use_cache=True, **kwargs).past_key_values
    cache.batch_repeat_interleave(copies)
    return cache


def paired_hidden(backbone: Any, input_ids: Any, attention_mask: Any, labels: Any) -> Any:
    """The backbone's last hidden states (2n, w, d) of DPO's right-padded batch [chosen rows; rejected rows], with
    each pair's common prefix up to its first scored position run once: its keys and values (with their graph:
    the adapter's gradient flows back through them) serve both rows, whose rest then runs on top of them. The prefix
    positions' states are left 0: nothing scores them (a position scores the next token's label)."""
    import torch

    n, width = input_ids.size(0) // 2, input_ids.size(1)
    rows: list[Any] = [None] * (2 * n)
    for i in range(n):
        pair = [i, n + i]
        ids, mask = input_ids[pair], attention_mask[pair]
        same = (ids[0] == ids[1]) & (mask[0] == 1) & (mask[1] == 1)
        common = int(same.long().cumprod(0).sum())
        scored = (labels[pair] != -100).any(dim=0).nonzero()  # a label at p is scored from the state at p - 1
        first = int(scored.min()) - 1 if len(scored) else width
        prefix = max(0, min(common, first))
        cache = prefix_cache(backbone, ids[:1, :prefix], 2) if prefix else None
        rest = backbone(input_ids=ids[:, prefix:], attention_mask=mask, past_key_values=cache,
                        use_cache=False).last_hidden_state
        states = torch.cat([rest.new_zeros(2, prefix, rest.size(-1)), rest], dim=1)
        rows[i], rows[n + i] = states[0], states[1]
    return torch.stack(rows)
