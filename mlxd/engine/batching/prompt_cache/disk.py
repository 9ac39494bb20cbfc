"""The prompt cache's disk tier (``--cache-disk DIR``, ``--cache-disk-max MIB``): entries that leave RAM, kept for
the next worker of the same model, in this process or after a restart.

One :class:`DiskStore` per directory and process, shared by every worker that names it (router mode's models, the
new worker of a reload while the old one drains): it holds the index, the byte budget and the writer thread. Each
worker sees it through a ``DiskTier`` (engine.batching.prompt_cache.disk_tier), bound to the worker's identity
(engine.batching.prompt_cache.identity), so an entry is offered only to a worker whose model and KV-relevant settings produced
it; the request's namespace (its kind, LoRA scales, media digest) and tokens do the rest, as in RAM.

The index (``index.json``) is written whole and renamed; if it is lost or does not parse, it is rebuilt from the
entry files' headers. Files left by a killed writer (``*.tmp``) are removed on open. Any entry that fails its
checksum or does not fit the cache it is read into is logged, deleted and never served.

Writes never block the worker for long: it copies the arrays to host memory (prompt_disk_format.encode) and hands
them to the writer thread through a bounded queue; when the queue is full the entry is dropped (counted). Only a
drain (worker stop) waits, and no longer than its deadline. A failed write (disk full, read-only) makes the store
read-only with a warning; a directory that cannot be read turns the tier off. Serving goes on either way.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlxd.engine.batching.prompt_cache import disk_format as fmt

log = logging.getLogger("mlxd.engine.batching.prompt_cache.disk")

INDEX = "index.json"
SUFFIX = ".kv"
EXPIRE_S = 7 * 24 * 3600.0  # an entry of a model no worker serves, unused this long, goes first and on open
_QUEUE = 4  # entries waiting for the writer thread
_QUEUE_BYTES = 1 << 30  # and the host memory they may hold


@dataclass
class Entry:
    """One file of the tier, as the index knows it."""

    name: str
    identity: str
    namespace: str
    tokens: np.ndarray  # int64
    size: int
    last_used: float

    def to_json(self) -> dict[str, Any]:
        return {"identity": self.identity, "namespace": self.namespace, "tokens": self.tokens.tolist(),
                "size": self.size, "last_used": self.last_used}


@dataclass
class Stats:
    """What the tier did, for /metrics and ``mlxd admin status`` (never decreasing, but ``bytes``/``entries``)."""

    hits: int = 0
    misses: int = 0
    tokens_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    writes: int = 0
    evictions: int = 0
    dropped: int = 0  # entries not written: the queue was full or the tier read-only
    corrupt: int = 0  # entries refused on reading (checksum, length, foreign)
    write_errors: int = 0

    def to_json(self) -> dict[str, int]:
        return dict(self.__dict__)


def _prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


@dataclass
class _Job:
    blob: fmt.Blob
    done: threading.Event = field(default_factory=threading.Event)


class DiskStore:
    """A cache directory's entries, budget and writer thread (one per directory and process; see :func:`open_store`)."""

    def __init__(self, root: Path, max_bytes: int | None) -> None:
        self.root = root
        self.max_bytes = max_bytes  # None: no limit; 0: read only
        self.stats = Stats()
        self.state = "rw"  # rw, ro (reads only), off
        self.live: dict[str, int] = {}  # identities of the workers using the store, with their counts
        self._lock = threading.Lock()
        self._entries: dict[str, Entry] = {}
        self._queue: queue.Queue[_Job | None] = queue.Queue(maxsize=_QUEUE)
        self._pending_bytes = 0
        self._pending: set[str] = set()  # names queued for the writer, not yet written
        self._index_dirty = False
        self._open()
        self._thread = threading.Thread(target=self._write_loop, name="mlxd-cache-disk", daemon=True)
        self._thread.start()

    # -- opening ----------------------------------------------------------------------------------------------
    def _open(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            names = os.listdir(self.root)
        except OSError as exc:
            log.warning("--cache-disk %s cannot be used (%s): the disk tier is off", self.root, exc)
            self.state = "off"
            return
        if self.max_bytes == 0 or not os.access(self.root, os.W_OK):
            self.state = "ro"
            if self.max_bytes != 0:
                log.warning("--cache-disk %s is not writable: the disk tier only reads", self.root)
        for name in names:
            if name.endswith(".tmp") and self.state == "rw":
                try:  # a write a kill interrupted: never renamed, never an entry
                    (self.root / name).unlink()
                except OSError:
                    pass
        known = self._read_index()
        for name in names:
            if not name.endswith(SUFFIX):
                continue
            path = self.root / name
            try:
                size = path.stat().st_size
            except OSError:
                continue
            entry = known.get(name)
            if entry is None or entry.size != size:
                try:
                    meta, size = fmt.read_header(path)
                except fmt.EntryError as exc:
                    log.warning("cache-disk: skipping %s: %s", path, exc)
                    self.stats.corrupt += 1
                    self._delete(name)
                    continue
                entry = Entry(name, meta.identity, meta.namespace, np.asarray(meta.tokens, dtype=np.int64), size,
                              _mtime(path))
                self._index_dirty = True
            self._entries[name] = entry
        if len(known) != len(self._entries):
            self._index_dirty = True
        log.info("cache-disk %s: %d entries, %.1f MiB (%s)", self.root, len(self._entries), self.nbytes / 2**20,
                 self.state)

    def _read_index(self) -> dict[str, Entry]:
        path = self.root / INDEX
        try:
            raw = json.loads(path.read_bytes())
            return {name: Entry(name, str(e["identity"]), str(e["namespace"]),
                                np.asarray(e["tokens"], dtype=np.int64), int(e["size"]), float(e["last_used"]))
                    for name, e in raw["entries"].items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("cache-disk: %s unreadable (%s): rebuilding it from the entries", path, exc)
            return {}

    # -- what workers ask ---------------------------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(e.size for e in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def best(self, identity: str, namespace: str, tokens: np.ndarray) -> tuple[Entry | None, int]:
        """The entry sharing the longest prefix with ``tokens`` and that prefix's length."""
        best: Entry | None = None
        n_best = 0
        with self._lock:
            first = tokens[0] if len(tokens) else None
            for e in self._entries.values():
                if e.identity == identity and e.namespace == namespace and e.tokens[0] == first:
                    n = _prefix(e.tokens, tokens)
                    if n > n_best:
                        best, n_best = e, n
        return best, n_best

    def recent(self, identity: str, count: int, max_tokens: int) -> list[Entry]:
        """The ``count`` most recently used entries of ``identity`` of at most ``max_tokens`` tokens, newest first."""
        with self._lock:
            mine = [e for e in self._entries.values() if e.identity == identity and len(e.tokens) <= max_tokens]
        return sorted(mine, key=lambda e: e.last_used, reverse=True)[:max(0, count)]

    def get(self, identity: str, namespace: str, tokens: list[int]) -> Entry | None:
        """The entry of exactly these tokens, when on disk."""
        with self._lock:
            return self._entries.get(_name(identity, namespace, tokens))

    def has(self, identity: str, namespace: str, tokens: list[int]) -> bool:
        """Whether the entry is on disk or on its way there."""
        name = _name(identity, namespace, tokens)
        with self._lock:
            return name in self._entries or name in self._pending

    def holds(self, entry: Entry) -> bool:
        with self._lock:
            return self._entries.get(entry.name) is entry

    def touch(self, entry: Entry) -> None:
        with self._lock:
            entry.last_used = time.time()
            self._index_dirty = True

    def forget(self, entry: Entry, why: str) -> None:
        """An entry that failed on reading: logged, deleted, never offered again."""
        log.warning("cache-disk: dropping %s: %s", self.root / entry.name, why)
        with self._lock:
            self.stats.corrupt += 1
            self._entries.pop(entry.name, None)
            self._index_dirty = True
        self._delete(entry.name)

    def put(self, blob: fmt.Blob, wait: float | None = None) -> bool:
        """Queue ``blob`` for writing; ``wait``: seconds to wait for room (None: not at all). Whether it was queued."""
        if self.state != "rw" or self.has(blob.meta.identity, blob.meta.namespace, list(blob.meta.tokens)):
            if self.state != "rw":
                self.stats.dropped += 1
            return False
        name = _name(blob.meta.identity, blob.meta.namespace, list(blob.meta.tokens))
        with self._lock:
            if self._pending_bytes + blob.nbytes > _QUEUE_BYTES and self._pending_bytes:
                self.stats.dropped += 1
                return False
            self._pending_bytes += blob.nbytes
            self._pending.add(name)
        try:
            if wait is None:
                self._queue.put_nowait(_Job(blob))
            else:
                self._queue.put(_Job(blob), timeout=max(0.001, wait))
        except queue.Full:
            with self._lock:
                self._pending_bytes -= blob.nbytes
                self._pending.discard(name)
                self.stats.dropped += 1
            return False
        return True

    def flush(self, deadline: float) -> bool:
        """Wait until every queued entry is written or ``deadline`` (monotonic) passes; whether all were."""
        marker = _Job(fmt.Blob(fmt.Meta("", "", (), ()), b"", []))
        try:
            self._queue.put(marker, timeout=max(0.001, deadline - time.monotonic()))
        except queue.Full:
            return False
        return marker.done.wait(max(0.0, deadline - time.monotonic()))

    # -- the writer thread -----------------------------------------------------------------------------------
    def _write_loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                if job.blob.meta.identity:
                    self._write(job.blob)
                if self._queue.empty():
                    self._save_index()
            except Exception:  # the writer must outlive any one entry
                log.exception("cache-disk: write failed")
            finally:
                if job.blob.meta.identity:
                    meta = job.blob.meta
                    with self._lock:
                        self._pending_bytes -= job.blob.nbytes
                        self._pending.discard(_name(meta.identity, meta.namespace, list(meta.tokens)))
                job.done.set()

    def _write(self, blob: fmt.Blob) -> None:
        if self.state != "rw":
            self.stats.dropped += 1
            return
        meta = blob.meta
        name = _name(meta.identity, meta.namespace, list(meta.tokens))
        if self.max_bytes is not None and blob.nbytes > self.max_bytes:
            self.stats.dropped += 1
            return
        self._evict(blob.nbytes)
        try:
            size = fmt.write(blob, self.root / name)
        except OSError as exc:
            self.stats.write_errors += 1
            if exc.errno in (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT):
                log.warning("cache-disk %s: %s; the disk tier is read only from now on", self.root, exc)
                self.state = "ro"
            else:
                log.warning("cache-disk %s: writing an entry failed: %s", self.root, exc)
            return
        with self._lock:
            self._entries[name] = Entry(name, meta.identity, meta.namespace, np.asarray(meta.tokens, dtype=np.int64),
                                        size, time.time())
            self.stats.writes += 1
            self.stats.bytes_written += size
            self._index_dirty = True

    def _evict(self, incoming: int) -> None:
        """Make room for ``incoming`` bytes under the budget: expired entries of models no worker serves first,
        then the least recently used."""
        if self.max_bytes is None:
            return
        now = time.time()
        with self._lock:
            total = sum(e.size for e in self._entries.values())
            if total + incoming <= self.max_bytes:
                return
            order = sorted(self._entries.values(),
                           key=lambda e: (not (e.identity not in self.live and now - e.last_used > EXPIRE_S),
                                          e.last_used))
            going = []
            for e in order:
                if total + incoming <= self.max_bytes:
                    break
                going.append(e.name)
                total -= e.size
                del self._entries[e.name]
            self.stats.evictions += len(going)
            self._index_dirty = True
        for name in going:
            self._delete(name)

    def expire(self) -> None:
        """Remove entries of models no worker serves that have not been used for EXPIRE_S."""
        if self.state != "rw":
            return
        now = time.time()
        with self._lock:
            going = [e.name for e in self._entries.values()
                     if e.identity not in self.live and now - e.last_used > EXPIRE_S]
            for name in going:
                del self._entries[name]
            self.stats.evictions += len(going)
            self._index_dirty = self._index_dirty or bool(going)
        for name in going:
            self._delete(name)

    def _delete(self, name: str) -> None:
        if self.state == "off":
            return
        try:
            (self.root / name).unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.debug("cache-disk: cannot remove %s: %s", name, exc)

    def _save_index(self) -> None:
        with self._lock:
            if not self._index_dirty or self.state != "rw":
                return
            body = {"version": 1, "entries": {n: e.to_json() for n, e in self._entries.items()}}
            self._index_dirty = False
        tmp = self.root / (INDEX + ".tmp")
        try:
            tmp.write_text(json.dumps(body, separators=(",", ":")))
            os.replace(tmp, self.root / INDEX)
        except OSError as exc:
            log.warning("cache-disk %s: cannot write the index: %s (it is rebuilt from the entries)", self.root, exc)

    def close(self, timeout: float = 2.0) -> None:
        """Write what is queued (within ``timeout``), end the writer thread and write the index."""
        self.flush(time.monotonic() + timeout)
        try:
            self._queue.put(None, timeout=1.0)
        except queue.Full:
            return  # the writer is stuck on a slow disk: it is a daemon thread, and the index is rebuilt if stale
        self._thread.join(timeout)
        self._save_index()


def _name(identity: str, namespace: str, tokens: list[int]) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(identity.encode())
    h.update(b"\0" + namespace.encode() + b"\0")
    h.update(np.asarray(tokens, dtype=np.int64).tobytes())
    return h.hexdigest() + SUFFIX


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
