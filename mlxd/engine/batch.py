"""The decode batch: the generating slots, their batched KV caches, and the tokens they feed next.

Rows join with the cache their prompt built (merged into mlx_lm's left-padded ``BatchKVCache``) and leave by
filtering it, so the batch never stops for anyone. ``tokens`` may still be computing when the step that feeds them
is built: this is how decoding pipelines its host work behind the device (``awaiting`` marks the rows whose
token has not been read back yet).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import mlx.core as mx

if TYPE_CHECKING:
    from mlxd.engine.slots import Slot


class DecodeBatch:
    """Slots in the generation phase, one row each."""

    def __init__(self) -> None:
        self.slots: list["Slot"] = []
        self.cache: list[Any] | None = None
        self.tokens: mx.array | None = None  # [B] uint32, the next input of each row
        self.awaiting: list[bool] = []  # row's input token not yet read back (and not yet accepted)

    def __len__(self) -> int:
        return len(self.slots)

    def add(self, slot: "Slot", kv: list[Any], token: int | mx.array, awaiting: bool = False) -> None:
        """Append a row: its cache, the token it feeds next, and whether that token is still to be accepted."""
        merged = [c.merge([c]) for c in kv]
        first = token.astype(mx.uint32).reshape(1) if isinstance(token, mx.array) else mx.array([token], mx.uint32)
        if self.cache is None or self.tokens is None:
            self.cache, self.tokens = merged, first
        else:
            for mine, theirs in zip(self.cache, merged):
                mine.extend(theirs)
            self.tokens = mx.concatenate([self.tokens, first])
        self.slots.append(slot)
        self.awaiting.append(awaiting)

    def extract(self, row: int) -> list[Any]:
        """A standalone copy of one row's cache (for the slot to keep after the row leaves)."""
        assert self.cache is not None
        kv = [c.extract(row) for c in self.cache]
        mx.async_eval([c.state for c in kv])
        return kv

    def remove(self, rows: list[int]) -> None:
        """Drop rows; the others keep their caches and pending tokens."""
        gone = set(rows)
        keep = [i for i in range(len(self.slots)) if i not in gone]
        if not keep:
            self.slots, self.cache, self.tokens, self.awaiting = [], None, None, []
            return
        assert self.cache is not None and self.tokens is not None
        for c in self.cache:
            c.filter(keep)
        self.tokens = self.tokens[mx.array(keep)]
        self.slots = [self.slots[i] for i in keep]
        self.awaiting = [self.awaiting[i] for i in keep]

    def row_of(self, slot: "Slot") -> int:
        return self.slots.index(slot)
