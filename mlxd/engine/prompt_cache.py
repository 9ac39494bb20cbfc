"""The host-memory prompt cache (``--cache-ram``): finished prompts' keys and values, reused by longest prefix.

Entries live in mlx_lm's ``LRUPromptCache`` (a token trie with least-recently-used eviction under a byte budget);
its "model" key is the request's cache namespace, so that a chat-rendered prefix is never adopted by a raw prompt
or under another LoRA state. A fetched cache is a copy: the stored entry is never written to.
"""

from __future__ import annotations

from typing import Any, cast

from mlx_lm.models.cache import LRUPromptCache, PromptTrie, can_trim_prompt_cache, trim_prompt_cache

from mlxd.engine.prompt_trie import IndexedPromptTrie
from mlxd.engine.slots import common_prefix

# The trie's entry-count bound is not one of llama-server's knobs; only the byte budget is.
_MAX_ENTRIES = 1 << 20


class PromptCache:
    """Longest-prefix reuse of computed prompts within a byte budget (None = unlimited, 0 = disabled)."""

    def __init__(self, max_bytes: int | None) -> None:
        self.enabled = max_bytes != 0
        self._lru = LRUPromptCache(max_size=_MAX_ENTRIES, max_bytes=(1 << 62) if max_bytes is None else max_bytes)
        # Same answers as mlx_lm's trie, without a lookup that walks every entry below the common prefix.
        # IndexedPromptTrie duck-types PromptTrie's interface (it does not subclass it; see prompt_trie.py).
        self._lru._trie = cast(PromptTrie, IndexedPromptTrie())

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
        if kv is None:
            return None, 0
        n = len(tokens) - len(rest)
        if n >= len(tokens):
            if not can_trim_prompt_cache(kv):
                return None, 0
            trim_prompt_cache(kv, n - (len(tokens) - 1))
            n = len(tokens) - 1
        return kv, n

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
