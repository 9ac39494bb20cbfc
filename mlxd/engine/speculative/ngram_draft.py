"""Draft-free proposals for speculative decoding (``--spec-type ngram-simple``, ``ngram-map-k``, ``ngram-map-k4v``,
``ngram-mod``, ``ngram-cache``).

``ngram-simple`` looks in the sequence's own history (``propose`` below); ``ngram-map-k`` and ``ngram-map-k4v`` in
a map each slot keeps of its history (engine.speculative.ngram_map); ``ngram-mod`` in a table of every sequence's n-grams
(engine.speculative.ngram_mod); ``ngram-cache`` in n-gram statistics of the slot's history and of two cache files
(engine.speculative.ngram_cache). ``Lookups`` asks them in b10621's order of preference.

As b10621's ngram-simple: the last ``size_n`` tokens (the token just sampled last) are looked up in the earlier
history, newest match first, and up to ``size_m`` tokens that followed that match are proposed, provided at least
``size_n`` of them exist. Text that repeats itself (code being edited, a quoted document, a list) gets long
proposals for free; other text gets none, and its step is a plain decode step. The target verifies proposals as
it verifies a draft model's, so greedy output is unchanged and sampling keeps its distribution.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from mlxd.engine.speculative import ngram_cache
from mlxd.engine.speculative.ngram_cache import NgramCaches
from mlxd.engine.speculative.ngram_map import NgramMap, NgramMapConfig, newest
from mlxd.engine.speculative.ngram_mod import NgramMod, NgramModConfig, SequenceState
from mlxd.engine.settings import WorkerSettings


@dataclass(frozen=True)
class NgramConfig:
    """``--spec-ngram-simple-size-n`` / ``--spec-ngram-simple-size-m``."""

    size_n: int = 12
    size_m: int = 48


def propose(history: list[int], sampled: int, cfg: NgramConfig, limit: int) -> list[int]:
    """Up to ``min(cfg.size_m, limit)`` tokens to verify after ``sampled``, from ``history`` (the tokens before it)."""
    n, m = cfg.size_n, cfg.size_m
    length = len(history)
    if length <= n + m + 1 or limit <= 0:
        return []
    # b10621 looks at windows starting at 1 .. length - n - 1, newest first (not the current one, not position 0).
    found = newest(history, history[length - n + 1:] + [sampled], length - n - 1, 0)
    if found == 0:
        return []
    start = found + n
    take = min(m, length - start)
    if take < n:
        return []
    return history[start:start + min(take, limit)]


Accepted = Callable[[int], None]  # told how many of a row's proposals the target kept


@dataclass
class Lookups:
    """The draft-free types of ``--spec-type`` a model serves, asked in b10621's order: ngram-simple, ngram-map-k,
    ngram-map-k4v, ngram-mod, then ngram-cache (a row that none serves may still use the draft model)."""

    simple: NgramConfig | None = None
    maps: tuple[NgramMapConfig, ...] = ()  # ngram-map-k, ngram-map-k4v: one map of each per slot
    mod: NgramMod | None = None
    cache: NgramCaches | None = None
    # Each slot's maps, kept from request to request as b10621 keeps them, with the sequence they last began.
    _slot_maps: dict[int, tuple[Any, list[NgramMap]]] = field(default_factory=dict)

    @classmethod
    def of(cls, settings: WorkerSettings) -> "Lookups | None":
        """The draft-free types ``--spec-type`` names, with their options; None when it names none."""
        types = settings.spec_type
        simple = NgramConfig(settings.spec_ngram_simple_size_n, settings.spec_ngram_simple_size_m) \
            if "ngram-simple" in types else None
        maps = tuple(cfg for t, cfg in (
            ("ngram-map-k", NgramMapConfig(settings.spec_ngram_map_k_size_n, settings.spec_ngram_map_k_size_m,
                                           settings.spec_ngram_map_k_min_hits, key_only=True)),
            ("ngram-map-k4v", NgramMapConfig(settings.spec_ngram_map_k4v_size_n, settings.spec_ngram_map_k4v_size_m,
                                             settings.spec_ngram_map_k4v_min_hits, key_only=False))) if t in types)
        mod = NgramMod(NgramModConfig(settings.spec_ngram_mod_n_match, settings.spec_ngram_mod_n_min,
                                      settings.spec_ngram_mod_n_max)) if "ngram-mod" in types else None
        static, dynamic = settings.lookup_cache_static, settings.lookup_cache_dynamic
        cache = NgramCaches(ngram_cache.load(static) if static else {}, ngram_cache.load(dynamic) if dynamic else {}
                            ) if "ngram-cache" in types else None
        if simple is None and not maps and mod is None and cache is None:
            return None
        return cls(simple, maps, mod, cache)

    def might_propose(self, slot: Any, seq: Any) -> bool:
        """Whether a lookup after the sequence's last token would find something; changes nothing the lookups
        keep, but for what they learn from the tokens as they come (ngram-mod's table, ngram-cache's context)."""
        tokens = seq.all_tokens
        if not tokens:
            return False
        history, sampled = tokens[:-1], tokens[-1]
        if self.simple is not None and propose(history, sampled, self.simple, 1):
            return True
        if any(m.peek(history, sampled) for m in self._maps(slot, seq)):
            return True
        if self.mod is not None and self._mod(seq, history, sampled, 1)[0]:
            return True
        return self.cache is not None and self.cache.peek(slot.id, history, sampled)

    def propose(self, slot: Any, seq: Any, limit: int) -> tuple[list[int], Accepted | None]:
        """Proposals to verify after the sequence's last token (up to ``limit``), and whom to tell how many were
        kept (None: no one keeps count)."""
        tokens = seq.all_tokens
        if not tokens or limit <= 0:
            return [], None
        history, sampled = tokens[:-1], tokens[-1]
        if self.simple is not None:
            found = propose(history, sampled, self.simple, limit)
            if found:
                return found, None
        for m in self._maps(slot, seq):
            found = m.propose(history, sampled)[:limit]
            if found:
                return found, m.accepted
        if self.mod is not None:
            found, count = self._mod(seq, history, sampled, limit)
            if found:
                return found, count
        if self.cache is not None:
            return self.cache.propose(slot.id, history, sampled)[:limit], None
        return [], None

    def _maps(self, slot: Any, seq: Any) -> list[NgramMap]:
        """The slot's maps, begun with the sequence's prompt when it is a new one (b10621's ``begin``)."""
        if not self.maps:
            return []
        began, maps = self._slot_maps.get(slot.id, (None, []))
        if not maps:
            maps = [NgramMap(cfg) for cfg in self.maps]
        if began is not seq:
            for m in maps:
                m.begin(seq.prompt)
            self._slot_maps[slot.id] = (seq, maps)
        return maps

    def _mod(self, seq: Any, history: list[int], sampled: int, limit: int) -> tuple[list[int], Accepted | None]:
        assert self.mod is not None
        mod = self.mod
        if seq.ngram_state is None:  # the sequence's first proposal: its prompt goes into the table
            seq.ngram_state = SequenceState()
            mod.begin(seq.ngram_state, seq.prompt)
        state = seq.ngram_state
        return mod.propose(state, history, sampled, limit), lambda kept: mod.accepted(state, kept)
