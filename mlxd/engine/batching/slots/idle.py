"""``--cache-idle-slots`` (b10621's default): when a task starts, every idle slot's cache goes to the prompt cache.

With a unified KV cache (``--kv-unified``, the default when the slot count is auto) the idle slot is cleared as
well: under llama.cpp that frees cells the running slots share; here it hands the slot's arrays to the prompt
cache, whose ``--cache-ram`` budget then bounds what idle slots hold. Without it the prompt cache gets a copy and
the slot keeps its own, so a follow-up on that slot still takes its cache over without one. A slot's tokens are
saved once: until the slot runs another request, the prompt cache already holds them (b10621's "already in the
cache" skip).

The lines ``__TEST_TAG_CACHE_IDLE_SLOTS_ENABLED__`` and ``__TEST_TAG_CACHE_IDLE_SLOT__`` are b10621's own debug
markers for these two events, which llama.cpp's server tests read from the log (``--verbose``); they are written
here at the same events.
"""

from __future__ import annotations

import copy
import logging

from mlxd.engine.batching.prompt_cache.ram import PromptCache
from mlxd.engine.batching.slots.table import SlotRegistry

log = logging.getLogger("mlxd.engine.batching.scheduler")


def enabled(wanted: bool, cache: PromptCache, unified: bool) -> bool:
    """Whether idle slots are saved: asked for, and a prompt cache to save them to (logged as b10621 does)."""
    if not wanted:
        return False
    if not cache.enabled:
        log.warning("--cache-idle-slots requires --cache-ram, disabling")
        return False
    if unified:
        log.info("idle slots will be saved to prompt cache and cleared upon starting a new task")
    else:
        log.info("idle slots will be saved to prompt cache upon starting a new task")
    log.debug("__TEST_TAG_CACHE_IDLE_SLOTS_ENABLED__")
    return True


def save_idle(slots: SlotRegistry, cache: PromptCache, *, clear: bool) -> int:
    """Save every idle slot's resident cache to ``cache`` (``clear``: moved, the slot left empty); returns how many
    were saved."""
    saved = 0
    for slot in slots.idle():
        res = slot.resident
        if res is None or not res.tokens:
            continue
        if clear:
            slot.resident = None
        if res.published:  # already there since this slot's last request
            continue
        # The slot goes on writing into its arrays (a follow-up extends them in place), so a kept slot gives a copy.
        cache.insert(res.namespace, res.tokens, res.kv if clear else copy.deepcopy(res.kv))
        res.published = True
        saved += 1
        log.debug("slot %d: saved idle slot to prompt cache (%d tokens)%s", slot.id, len(res.tokens),
                  ", cleared" if clear else "")
        log.debug("slot %d: __TEST_TAG_CACHE_IDLE_SLOT__", slot.id)
    return saved
