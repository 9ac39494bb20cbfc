"""A restarted daemon's slots as they were: the disk tier's most recent entries back in the empty slots.

A drain (SIGTERM, SIGHUP, a reload) writes the slots' caches to the disk tier first, and marks an entry already
there as just used. When the model's worker starts again, before it takes a request, each empty slot gets one of
the most recently used entries of this model that fits the slot's context. A client that sends its prompt again then
finds it in a slot, as it would have before the restart: taken over without a copy (the warm path), where a read
from the tier at request time copies the entry and traces the step for its length first (docs/benchmarks.md,
section 10). Worker thread: the arrays belong to its stream.
"""

from __future__ import annotations

import logging
import time

from mlxd.engine.batching.prompt_cache.ram import PromptCache
from mlxd.engine.batching.slots.table import Resident, SlotRegistry

log = logging.getLogger("mlxd.engine.batching.scheduler")


def restore(slots: SlotRegistry, cache: PromptCache) -> int:
    """Fill the empty slots from the disk tier; returns how many were filled."""
    empty = [s for s in slots.slots if s.resident is None and s.seq is None]
    if cache.disk is None or not empty:
        return 0
    t0 = time.perf_counter()
    try:  # A slot keeps at least one position free: the next token of a prompt it holds whole.
        restored = cache.restore(len(empty), min(s.n_ctx for s in empty) - 1)
    except Exception:  # never a reason not to serve: the slots start empty, as without the tier
        log.exception("prompt cache: restoring the slots from the disk tier failed")
        return 0
    for slot, (namespace, tokens, kv) in zip(empty, restored):
        slot.resident = Resident(namespace, tokens, kv)
    if restored:
        log.info("prompt cache: %d slot(s) restored from the disk tier in %.2f s (%d tokens)", len(restored),
                 time.perf_counter() - t0, sum(len(tokens) for _, tokens, _ in restored))
    return len(restored)
