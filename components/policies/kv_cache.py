"""A key/value cache that grows in place: decoding appends one position without copying the cache.

transformers' DynamicLayer concatenates the whole cache with each new token; at a batch of 16 episodes with
a thousand tokens each that copy was about half of a CPU decoding step. This layer keeps a buffer with room for
the tokens still to come (`reserve`) and writes each new position into it; `keys`/`values` are views of the
filled part, so everything that reads a DynamicLayer reads this one the same way.
"""

from __future__ import annotations

from typing import Any

from transformers.cache_utils import DynamicCache, DynamicLayer


class GrowingLayer(DynamicLayer):
    def __init__(self, reserve: int = 256):
        super().__init__()
        self.reserve = reserve
        self._kbuf: Any = None
        self._vbuf: Any = None
        self._len = 0

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        need = self._len + key_states.shape[-2]
        if self._kbuf is None or need > self._kbuf.shape[-2]:
            self._grow(key_states, value_states, need + self.reserve)
        self._kbuf[:, :, self._len: need] = key_states
        self._vbuf[:, :, self._len: need] = value_states
        self._len = need
        self.keys, self.values = self._kbuf[:, :, :need], self._vbuf[:, :, :need]
        return self.keys, self.values

    def _grow(self, key_states: Any, value_states: Any, capacity: int) -> None:
        b, h, _, dk = key_states.shape
        kbuf = key_states.new_empty((b, h, capacity, dk))
        vbuf = value_states.new_empty((b, h, capacity, value_states.shape[-1]))
        if self._kbuf is not None:
            kbuf[:, :, : self._len] = self._kbuf[:, :, : self._len]
            vbuf[:, :, : self._len] = self._vbuf[:, :, : self._len]
        self._kbuf, self._vbuf = kbuf, vbuf

    def select_rows(self, index: Any) -> None:
        """Keep only these batch rows (finished episodes leave the batch, so later steps cost less)."""
        self._kbuf, self._vbuf = self._kbuf.index_select(0, index), self._vbuf.index_select(0, index)
        self.keys, self.values = self._kbuf[:, :, : self._len], self._vbuf[:, :, : self._len]

    def get_seq_length(self) -> int:
        return self._len if self.is_initialized else 0

    def reset(self) -> None:
        self._kbuf = self._vbuf = None
        self._len = 0
        super().reset()

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("GrowingLayer does not crop")


def growing_cache(model_config: Any, reserve: int) -> DynamicCache:
    """A DynamicCache whose layers grow in place, with room for `reserve` more tokens."""
    cache = DynamicCache(config=model_config)
    cache.layers = [GrowingLayer(reserve) for _ in range(model_config.num_hidden_layers)]
    return cache
