"""The decode batch: the generating slots, their batched KV caches, and the tokens they feed next.

Rows join with the cache their prompt built (merged into mlx_lm's left-padded ``BatchKVCache``) and leave by
filtering it, so the batch never stops for anyone. ``tokens`` may still be computing when the step that feeds them
is built: this is how decoding pipelines its host work behind the device (``awaiting`` marks the rows whose
token has not been read back yet).

A lone row decodes on its own plain ``KVCache`` list instead: the batched cache costs an attention mask and
padding bookkeeping in every layer, about 6 % of a one-stream step on the tiny checkpoint. It is merged when a
second row joins, and the last row's cache is extracted back when the batch shrinks to one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import mlx.core as mx
from mlxd.engine.loading.kv_types import is_batched, is_single

if TYPE_CHECKING:
    from mlxd.engine.batching.slots.table import Slot


class DecodeBatch:
    """Slots in the generation phase, one row each."""

    def __init__(self) -> None:
        self.slots: list["Slot"] = []
        self.cache: list[Any] | None = None
        self.tokens: mx.array | None = None  # [B] uint32, the next input of each row
        self.awaiting: list[bool] = []  # row's input token not yet read back (and not yet accepted)
        self.solo = False  # one row, decoding on its own plain caches

    def __len__(self) -> int:
        return len(self.slots)

    def add(self, slot: "Slot", kv: list[Any], token: int | mx.array, awaiting: bool = False) -> None:
        """Append a row: its cache, the token it feeds next, and whether that token is still to be accepted."""
        first = token.astype(mx.uint32).reshape(1) if isinstance(token, mx.array) else mx.array([token], mx.uint32)
        if self.cache is None or self.tokens is None:
            self.solo = all(is_single(c) for c in kv)
            self.cache, self.tokens = list(kv) if self.solo else [c.merge([c]) for c in kv], first
        else:
            if self.solo:
                self.cache, self.solo = [c.merge([c]) for c in self.cache], False
            for mine, theirs in zip(self.cache, [c.merge([c]) for c in kv]):
                mine.extend(theirs)
            self.tokens = mx.concatenate([self.tokens, first])
        self.slots.append(slot)
        self.awaiting.append(awaiting)

    def extract(self, row: int) -> list[Any]:
        """One row's cache on its own, for the slot to keep once the row is removed (a lone row's own caches are
        handed over as they are: the batch forgets them when the row leaves)."""
        assert self.cache is not None
        if self.solo:
            return list(self.cache)
        kv = [c.extract(row) for c in self.cache]
        mx.async_eval([c.state for c in kv])
        return kv

    def remove(self, rows: list[int]) -> None:
        """Drop rows; the others keep their caches and pending tokens."""
        gone = set(rows)
        keep = [i for i in range(len(self.slots)) if i not in gone]
        if not keep:
            self.slots, self.cache, self.tokens, self.awaiting, self.solo = [], None, None, [], False
            return
        assert self.cache is not None and self.tokens is not None
        if len(keep) == 1 and all(is_batched(c) for c in self.cache):
            self.cache, self.solo = [c.extract(keep[0]) for c in self.cache], True
        else:
            for c in self.cache:
                c.filter(keep)
        self.tokens = self.tokens[mx.array(keep)]
        self.slots = [self.slots[i] for i in keep]
        self.awaiting = [self.awaiting[i] for i in keep]

    def row_of(self, slot: "Slot") -> int:
        return self.slots.index(slot)
