"""Packed attention: episodes laid end to end in one row attend only to themselves, exactly as when run alone."""

from __future__ import annotations

import pytest
import torch

from components.training import packed_attention
from components.training.packed_attention import segment_bounds


@pytest.fixture(scope="module")
def models(tiny_model):
    from transformers import AutoModelForCausalLM

    packed = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32,
                                                  attn_implementation=packed_attention.register()).eval()
    sdpa = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32, attn_implementation="sdpa").eval()
    assert packed.config._attn_implementation == packed_attention.NAME
    return packed, sdpa


def _ids(n: int, seed: int) -> torch.Tensor:
    return torch.randint(10, 5000, (1, n), generator=torch.Generator().manual_seed(seed))


def test_segment_bounds_split_a_row_where_the_positions_reset():
    pos = torch.tensor([[0, 1, 2, 3, 0, 1, 0, 1, 2]])
    assert segment_bounds(pos) == [(0, 4), (4, 6), (6, 9)]
    assert segment_bounds(torch.arange(5)[None]) == [(0, 5)]
    assert segment_bounds(torch.tensor([[0, 0, 0]])) == [(0, 1), (1, 2), (2, 3)]  # one-token sequences


def test_two_sequences_packed_in_one_row_give_the_logits_each_gives_alone(models):
    packed, sdpa = models
    a, b = _ids(9, 0), _ids(6, 1)
    row = torch.cat([a, b], dim=1)
    pos = torch.cat([torch.arange(9), torch.arange(6)])[None]
    with torch.no_grad():
        together = packed(input_ids=row, position_ids=pos).logits[0]
        alone_a = sdpa(input_ids=a).logits[0]
        alone_b = sdpa(input_ids=b).logits[0]
        # the same row through plain sdpa, without a mask, lets the second sequence see the first
        leaky = sdpa(input_ids=row, position_ids=pos).logits[0]
    torch.testing.assert_close(together[:9], alone_a, atol=1e-4, rtol=0)
    torch.testing.assert_close(together[9:], alone_b, atol=1e-4, rtol=0)
    assert (leaky[9:] - alone_b).abs().max() > 1e-3  # so the comparison above can tell the difference


def test_a_padded_batch_takes_the_sdpa_path_and_matches_it(models):
    packed, sdpa = models
    ids = torch.cat([_ids(8, 2), torch.cat([_ids(5, 3), torch.zeros(1, 3, dtype=torch.long)], dim=1)])
    mask = torch.tensor([[1] * 8, [1] * 5 + [0] * 3])
    with torch.no_grad():
        got = packed(input_ids=ids, attention_mask=mask).logits
        want = sdpa(input_ids=ids, attention_mask=mask).logits
        short_alone = sdpa(input_ids=ids[1:, :5]).logits[0]
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
    torch.testing.assert_close(got[1, :5], short_alone, atol=1e-4, rtol=0)  # the padding changed nothing real
