"""llama-server's slots: a fixed set of sequence places, each with its own context budget and resident cache.

A slot runs one request at a time. When the request ends, the slot keeps the request's tokens and their keys and
values (llama-server keeps them in the slot's KV cells), so that the next request on that slot can reuse the
common prefix; ``/slots`` shows what the slot last ran.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlxd.engine.batching.sequence import Sequence

# llama-server's --slot-prompt-similarity default: how much of a new prompt a slot's cached tokens must cover for
# that slot to be preferred over the least recently used one (0 turns the preference off).
SLOT_PROMPT_SIMILARITY = 0.1


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class Resident:
    """What a slot keeps after a request: its tokens and their per-layer cache, in a namespace."""

    namespace: str
    tokens: list[int]
    kv: list[Any]
    published: bool = False  # the prompt cache holds a copy of these tokens (--cache-idle-slots saved them)


@dataclass
class Slot:
    """One place for a running sequence."""

    id: int
    n_ctx: int
    seq: "Sequence | None" = None  # the request running now
    last: "Sequence | None" = None  # the request that ran last (shown on /slots once the slot is idle)
    kv: list[Any] | None = None  # the running request's cache while its prompt is processed
    resident: Resident | None = None
    t_last_used: float = field(default_factory=time.monotonic)
    speculative: bool = False  # the worker has a draft model (b10621's /slots "speculative")

    @property
    def is_processing(self) -> bool:
        return self.seq is not None

    def to_json(self, debug: bool = False) -> dict[str, Any]:
        """The slot as b10621's ``GET /slots`` renders it (read from another thread: one snapshot of each field)."""
        running, last, resident = self.seq, self.last, self.resident
        out: dict[str, Any] = {
            "id": self.id,
            "n_ctx": self.n_ctx,
            "speculative": self.speculative,
            "is_processing": running is not None,
        }
        seq = running or last
        if seq is None:
            return out
        out["id_task"] = seq.id_task
        if running is not None:
            out["n_prompt_tokens"] = seq.n_past
        else:
            out["n_prompt_tokens"] = len(resident.tokens) if resident is not None else 0
        out["n_prompt_tokens_processed"] = seq.n_prompt_processed
        out["n_prompt_tokens_cache"] = seq.n_cache
        out["params"] = dict(seq.request.display_params)
        out["next_token"] = [
            {
                "has_next_token": seq.has_next_token if running is not None else False,
                "has_new_line": seq.has_new_line,
                "n_remain": seq.n_remain if running is not None else -1,
                # An idle slot shows 0, as b10621 does once a task ends (its counters belong to the running task).
                "n_decoded": seq.n_decoded if running is not None else 0,
            }
        ]
        if debug:
            out["prompt"] = ""  # filled by the caller, which owns the tokenizer
            out["generated"] = seq.text
        return out


class SlotRegistry:
    """The slots of one worker, and upstream's rule for choosing one."""

    def __init__(self, n_parallel: int, n_ctx: int, similarity: float = SLOT_PROMPT_SIMILARITY) -> None:
        self.slots = [Slot(i, n_ctx) for i in range(n_parallel)]
        self.n_ctx = n_ctx
        self.similarity = similarity

    def __len__(self) -> int:
        return len(self.slots)

    def idle(self) -> list[Slot]:
        return [s for s in self.slots if not s.is_processing]

    def busy(self) -> list[Slot]:
        return [s for s in self.slots if s.is_processing]

    def choose(self, tokens: list[int], namespace: str, id_slot: int = -1) -> Slot | None:
        """The slot a request should run on now, or None when it must wait.

        A pinned ``id_slot`` waits for that slot. Otherwise, as upstream: the idle slot whose resident tokens
        share the longest prefix with the prompt (when that covers more than ``similarity`` of it, and
        ``similarity`` is not 0), else the least recently used.
        """
        if id_slot >= 0:
            slot = self.slots[id_slot]
            return None if slot.is_processing else slot
        idle = self.idle()
        if not idle:
            return None
        best, best_len = None, 0
        for slot in idle:
            res = slot.resident
            if res is None or res.namespace != namespace:
                continue
            n = common_prefix(res.tokens, tokens)
            if n > best_len:
                best, best_len = slot, n
        if self.similarity != 0 and best is not None and tokens and best_len / len(tokens) > self.similarity:
            return best
        return min(idle, key=lambda s: s.t_last_used)
