"""The host-memory prompt cache (``--cache-ram``): finished prompts' keys and values, reused by longest prefix.

Entries live in mlx_lm's ``LRUPromptCache`` (a token trie with least-recently-used eviction under a byte budget);
its "model" key is the request's cache namespace, so that a chat-rendered prefix is never adopted by a raw prompt
or under another LoRA state. A fetched cache is a copy: the stored entry is never written to.

With a disk tier (``--cache-disk``, engine.batching.prompt_cache.disk) attached, entries the byte budget evicts are written there,
a prompt that the tier covers further than RAM does is read from it, and ``spill`` writes what RAM holds when the
worker stops. Without ``--cache-ram`` (0) the tier still works: every entry goes straight through to disk.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from mlx_lm.models.cache import LRUPromptCache, PromptTrie, can_trim_prompt_cache, trim_prompt_cache

from mlxd.engine.batching.prompt_cache.disk_tier import DiskTier
from mlxd.engine.batching.prompt_cache.trie import IndexedPromptTrie
from mlxd.engine.batching.slots.table import common_prefix

# The trie's entry-count bound is not one of llama-server's knobs; only the byte budget is.
_MAX_ENTRIES = 1 << 20


class _SpillingTrie(IndexedPromptTrie):
    """The trie, telling the cache of each entry the LRU evicts (mlx_lm's LRUPromptCache removes an entry through
    ``pop`` only when evicting it; prefixes that a longer entry makes redundant go through ``pop_prefixes``)."""

    def __init__(self, on_evict: Callable[[Any, list[int], Any], None]) -> None:
        super().__init__()
        self._on_evict = on_evict

    def pop(self, model: Any, tokens: list[int]) -> Any:
        value = super().pop(model, tokens)
        self._on_evict(model, tokens, value)
        return value


class PromptCache:
    """Longest-prefix reuse of computed prompts within a byte budget (None = unlimited, 0 = disabled)."""

    def __init__(self, max_bytes: int | None) -> None:
        self.enabled = max_bytes != 0
        self.disk: DiskTier | None = None
        self._new_cache: Callable[[], list[Any]] | None = None
        self._lru = LRUPromptCache(max_size=_MAX_ENTRIES, max_bytes=(1 << 62) if max_bytes is None else max_bytes)
        # Same answers as mlx_lm's trie, without a lookup that walks every entry below the common prefix.
        # IndexedPromptTrie duck-types PromptTrie's interface (it does not subclass it; see prompt_trie.py).
        self._lru._trie = cast(PromptTrie, _SpillingTrie(self._evicted))

    def attach_disk(self, disk: DiskTier, new_cache: Callable[[], list[Any]]) -> None:
        """Put the disk tier under this cache; ``new_cache`` makes a fresh cache of the model (the entries' shape)."""
        self.disk, self._new_cache = disk, new_cache
        self.enabled = True

    def detach_disk(self) -> DiskTier | None:
        disk, self.disk = self.disk, None
        return disk

    def _evicted(self, namespace: Any, tokens: list[int], entry: Any) -> None:
        if self.disk is not None:
            self.disk.spill(str(namespace), list(tokens), entry.prompt_cache)

    def observe_prompt(self, n_tokens: int, seconds: float) -> None:
        """A prompt's computed part and its time, for the tier's decision whether reading beats computing."""
        if self.disk is not None:
            self.disk.worth.observe_prompt(n_tokens, seconds)

    def spill(self, residents: Sequence[tuple[str, list[int], list[Any]]], deadline: float,
              in_slots: Sequence[tuple[str, list[int]]] = ()) -> int:
        """Write ``residents`` (the slots' caches) and every RAM entry, most recently used first, to the disk tier
        until ``deadline`` (monotonic); returns how many were queued. Worker thread, when the worker stops.

        The entries then carry the order of their use, ``in_slots`` (what every slot holds, whether the RAM cache has
        it too) the most recent, so that a restarted worker puts them back in its slots (slots.restore)."""
        disk = self.disk
        if disk is None:
            return 0
        lru = self._lru._lru
        held = [(str(ns), list(toks), self._lru._trie.get(ns, toks).prompt_cache)
                for kind in reversed(lru._ordering) for ns, toks in reversed(lru._lrus[kind])]
        n = 0
        for namespace, tokens, kv in [*residents, *held]:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            n += disk.spill(namespace, tokens, kv, wait=left)
        disk.store.flush(deadline)
        for namespace, tokens in [*((ns, toks) for ns, toks, _ in reversed(held)), *reversed(in_slots)]:
            disk.mark_used(namespace, tokens)
        return n

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def nbytes(self) -> int:
        return self._lru.nbytes

    def fetch(self, namespace: str, tokens: list[int]) -> tuple[list[Any] | None, int]:
        """A private copy of the cache for the longest stored prefix of ``tokens``, and that prefix's length.

        At least one token is always left to process, since the next token's logits come from it.
        """
        if not self.enabled or len(tokens) < 2:
            return None, 0
        kv, rest = self._lru.fetch_nearest_cache(namespace, tokens)
        n = len(tokens) - len(rest) if kv is not None else 0
        if self.disk is not None:
            from_disk = self._from_disk(namespace, tokens, n)
            if from_disk[0] is not None:
                return from_disk
        if kv is None:
            return None, 0
        if n >= len(tokens):
            if not can_trim_prompt_cache(kv):
                return None, 0
            trim_prompt_cache(kv, n - (len(tokens) - 1))
            n = len(tokens) - 1
        return kv, n

    def _from_disk(self, namespace: str, tokens: list[int], n_ram: int) -> tuple[list[Any] | None, int]:
        """The disk tier's entry for ``tokens`` when it covers more than RAM's ``n_ram`` tokens by enough."""
        assert self.disk is not None and self._new_cache is not None
        n_ram = min(n_ram, len(tokens) - 1)
        if len(tokens) - 1 - n_ram < self.disk.worth.min_tokens:
            return None, 0  # RAM covers the prompt, or all but too few tokens for a read to pay
        found = self.disk.lookup(namespace, tokens, n_ram)
        if found is None:
            return None, 0
        entry, n = found
        kv = self.disk.load(entry, self._new_cache())
        if kv is None:
            return None, 0
        excess = len(entry.tokens) - n
        if excess:
            trim_prompt_cache(kv, excess)
        self.disk.store.stats.tokens_read += n
        return kv, n

    def restore(self, count: int, max_tokens: int) -> list[tuple[str, list[int], list[Any]]]:
        """The disk tier's ``count`` most recently used entries of this model, read back (worker thread): each one's
        namespace, tokens and caches, for the slots of a restarted daemon."""
        disk = self.disk
        if disk is None or self._new_cache is None:
            return []
        restored = []
        for entry in disk.recent(count, max_tokens):
            kv = disk.load(entry, self._new_cache())
            if kv is not None:
                restored.append((entry.namespace, [int(t) for t in entry.tokens], kv))
        return restored

    def insert(self, namespace: str, tokens: list[int], kv: list[Any]) -> None:
        """Store a finished sequence's cache under its tokens (evicting least recently used entries)."""
        if not self.enabled or not tokens:
            return
        self._lru.insert_cache(namespace, list(tokens), kv)


def adopt(resident_tokens: list[int], resident_kv: list[Any], tokens: list[int]) -> tuple[list[Any] | None, int]:
    """Take over a slot's resident cache for ``tokens`` (trimmed in place) and the number of tokens it covers."""
    n = min(common_prefix(resident_tokens, tokens), len(tokens) - 1)
    if n <= 0:
        return None, 0
    excess = len(resident_tokens) - n
    if excess:
        if not can_trim_prompt_cache(resident_kv):
            return None, 0
        trim_prompt_cache(resident_kv, excess)
    return resident_kv, n
