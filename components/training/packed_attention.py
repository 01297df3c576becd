"""Attention for padding-free packed rows without a varlen kernel: each packed episode attends only to itself.

TRL's padding-free packing lays several episodes end to end in one row and marks their starts by resetting
`position_ids`. With flash-attention that is a varlen call; on CPU, transformers' sdpa path instead builds a
block-diagonal mask over the whole row and computes every cross-episode product only to mask it out — slower
than padding. This splits the row at the resets and runs causal sdpa per episode, so compute follows the sum of
the episodes' squared lengths, as a varlen kernel's does. Rows with a padding mask take the standard sdpa path.
"""

from __future__ import annotations

from typing import Any

NAME = "medgym_varlen"


def segment_bounds(position_ids: Any) -> list[tuple[int, int]]:
    """[start, end) of each packed sequence in a single row: a new one starts wherever the position resets."""
    import torch

    pos = position_ids[0]
    starts = torch.nonzero(pos[1:] != pos[:-1] + 1).flatten().add(1).tolist()
    edges = [0, *starts, int(pos.shape[0])]
    return list(zip(edges[:-1], edges[1:], strict=True))


def varlen_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
                     scaling: float | None = None, position_ids: Any = None, **kwargs: Any) -> tuple[Any, None]:
    import torch
    import torch.nn.functional as F
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    packed = (attention_mask is None and position_ids is not None and query.shape[0] == 1
              and query.shape[2] == key.shape[2] == position_ids.shape[-1])
    if not packed:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      position_ids=position_ids, **kwargs)
    gqa = query.shape[1] != key.shape[1]
    parts = [F.scaled_dot_product_attention(query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], is_causal=True,
                                            dropout_p=dropout, scale=scaling, enable_gqa=gqa)
             for s, e in segment_bounds(position_ids)]
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)
    return out.transpose(1, 2).contiguous(), None


def packed_mask(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0, kv_offset: int = 0,
                mask_function: Any = None, attention_mask: Any = None, **kwargs: Any) -> Any:
    """No mask at all for unpadded rows (the attention splits them itself); sdpa's mask when there is padding."""
    from transformers.masking_utils import causal_mask_function, sdpa_mask

    if attention_mask is None or (attention_mask.shape[-1] == kv_length and bool(attention_mask.all())):
        return None
    return sdpa_mask(batch_size, q_length, kv_length, q_offset, kv_offset,
                     mask_function=mask_function or causal_mask_function, attention_mask=attention_mask, **kwargs)


def register() -> str:
    """Register with transformers (idempotent); returns the name to pass as `attn_implementation`."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, varlen_attention)
    AttentionMaskInterface.register(NAME, packed_mask)
    return NAME
