"""Grouped-query attention for decoding without copying the cache.

Models like SmolLM2 share each key/value head among several query heads. transformers' sdpa path on CPU copies
the whole key/value cache to one head per query head (`repeat_kv`) on every decoding step once there is a padding
mask, which made that copy most of a batched step's time. For a single new token this computes the grouped
product directly against the shared heads; prompts (more than one new token) take the standard sdpa path.
"""

from __future__ import annotations

from typing import Any

NAME = "medgym_gqa"


def grouped_decode_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                             dropout: float = 0.0, scaling: float | None = None, **kwargs: Any) -> tuple[Any, None]:
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    if query.shape[2] != 1 or groups == 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    scale = scaling if scaling is not None else dim ** -0.5
    # query head j reads key/value head j // groups, as repeat_kv lays them out
    q = query.view(batch, kv_heads, groups, dim)
    scores = torch.matmul(q, key.transpose(-1, -2)) * scale  # [batch, kv_heads, groups, length]
    if attention_mask is not None:
        mask = attention_mask[:, :, -1:, : key.shape[-2]]  # [batch, 1, 1, length]
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + mask
    probs = torch.softmax(scores.float(), dim=-1).to(value.dtype)
    out = torch.matmul(probs, value)  # [batch, kv_heads, groups, dim]
    return out.reshape(batch, heads, 1, dim).transpose(1, 2).contiguous(), None


def register() -> str:
    """Register the implementation with transformers (idempotent); the name to pass as attn_implementation."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, grouped_decode_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME
