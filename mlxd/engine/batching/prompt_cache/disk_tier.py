"""The disk tier as a worker and the process see it: the stores opened in this process (one per directory, held
while a worker uses it), their totals for /metrics and status, and :class:`DiskTier`, one worker's view of a store:
its identity, the decision whether an entry is worth reading (engine.batching.prompt_cache.disk_worth), reads on the worker thread
and entries handed to the writer.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from mlxd.engine.batching.prompt_cache import disk_format as fmt
from mlxd.engine.batching.prompt_cache.disk import DiskStore, Entry, Stats
from mlxd.engine.batching.prompt_cache.disk_worth import Worth

_stores: dict[Path, DiskStore] = {}
_stores_lock = threading.Lock()


_retired = Stats()  # what closed stores counted, so that the totals never go back
_opened_any = False


def open_store(root: str | Path, max_mib: int, identity: str) -> DiskStore:
    """The process's store for ``root``, held for a worker of ``identity`` until its DiskTier closes: opened (index
    read, files checked) when no worker holds it, else shared (a later budget replaces the earlier one). The hold is
    taken under the same lock as the lookup, so a store another worker is letting go is never handed out."""
    global _opened_any
    path = Path(root).expanduser().absolute()
    max_bytes = None if max_mib < 0 else max_mib * 1024 * 1024
    with _stores_lock:
        _opened_any = True
        store = _stores.get(path)
        if store is None:
            store = _stores[path] = DiskStore(path, max_bytes)
        else:
            store.max_bytes = max_bytes
        store.live[identity] = store.live.get(identity, 0) + 1
        return store


def _release(store: DiskStore) -> None:
    """The last tier over ``store`` closed: write its index, end its writer, and forget it (a later worker opens
    the directory again, as a restarted process would)."""
    with _stores_lock:
        if store.live or _stores.get(store.root) is not store:
            return
        del _stores[store.root]
        for k, v in store.stats.to_json().items():
            setattr(_retired, k, getattr(_retired, k) + v)
    store.close()


def stores() -> list[DiskStore]:
    """Every store open in this process (for /metrics and status)."""
    with _stores_lock:
        return list(_stores.values())


def summary() -> dict[str, Any] | None:
    """The tier's totals over every store this process opened, for ``mlxd admin status`` and /metrics (None when
    no worker of this process had a disk tier)."""
    opened = stores()
    with _stores_lock:
        if not _opened_any:
            return None
        total: dict[str, Any] = dict(_retired.to_json())
    for s in opened:
        for k, v in s.stats.to_json().items():
            total[k] += v
    total["entries"] = sum(len(s) for s in opened)
    total["bytes"] = sum(s.nbytes for s in opened)
    total["dirs"] = {str(s.root): s.state for s in opened}
    return total


class DiskTier:
    """One worker's view of a store (opened for its identity by :func:`open_store`): its identity, and the
    decision whether an entry is worth reading."""

    def __init__(self, store: DiskStore, identity: str, worth: Worth | None = None) -> None:
        self.store = store
        self.identity = identity
        self.worth = worth or Worth()
        store.expire()

    def close(self) -> None:
        with _stores_lock:
            n = self.store.live.get(self.identity, 0) - 1
            if n > 0:
                self.store.live[self.identity] = n
            else:
                self.store.live.pop(self.identity, None)
        _release(self.store)

    def lookup(self, namespace: str, tokens: list[int], n_ram: int) -> tuple[Entry, int] | None:
        """The entry worth reading for ``tokens``: it must cover more of the prompt than RAM does (``n_ram``) by
        enough tokens that reading it beats computing them (engine.batching.prompt_cache.disk_worth)."""
        if self.store.state == "off":
            return None
        entry, n = self.store.best(self.identity, namespace, np.asarray(tokens, dtype=np.int64))
        n = min(n, len(tokens) - 1)
        if entry is None or not self.worth.use(n - n_ram, entry.size):
            self.store.stats.misses += 1
            return None
        return entry, n

    def recent(self, count: int, max_tokens: int) -> list[Entry]:
        """This model's ``count`` most recently used entries of at most ``max_tokens`` tokens, newest first: what a
        restarted daemon's slots held when it stopped (the drain writes the slots' caches first)."""
        if self.store.state == "off":
            return []
        return self.store.recent(self.identity, count, max_tokens)

    def mark_used(self, namespace: str, tokens: list[int]) -> None:
        """The entry of exactly these tokens, when on disk, becomes the most recently used."""
        entry = self.store.get(self.identity, namespace, tokens)
        if entry is not None:
            self.store.touch(entry)

    def load(self, entry: Entry, like: list[Any]) -> list[Any] | None:
        """Read ``entry`` into caches shaped like ``like`` (worker thread); None (and the entry dropped) if it fails
        its checks."""
        t0 = time.perf_counter()
        try:
            meta, kv = fmt.load(self.store.root / entry.name, like)
            if (meta.identity, meta.namespace) != (self.identity, entry.namespace) or \
                    not np.array_equal(np.asarray(meta.tokens, dtype=np.int64), entry.tokens):
                raise fmt.EntryError("its header names another entry")
        except fmt.EntryError as exc:
            if self.store.holds(entry):  # else the writer evicted it meanwhile: a miss, not a bad file
                self.store.forget(entry, str(exc))
            self.store.stats.misses += 1
            return None
        self.worth.observe_read(entry.size, time.perf_counter() - t0)
        stats = self.store.stats
        stats.hits += 1
        stats.bytes_read += entry.size
        self.store.touch(entry)
        return kv

    def spill(self, namespace: str, tokens: list[int], kv: list[Any], wait: float | None = None) -> bool:
        """Hand an entry leaving RAM to the writer (worker thread); only entries long enough to be worth reading."""
        if self.store.state != "rw" or not self.worth.worth_writing(len(tokens)):
            return False
        if self.store.has(self.identity, namespace, tokens):
            return False
        blob = fmt.encode(self.identity, namespace, tokens, kv)
        if blob is None:
            return False
        return self.store.put(blob, wait)
