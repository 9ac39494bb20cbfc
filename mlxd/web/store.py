"""The chat page's conversations in SQLite (the standard library's ``sqlite3``), one file under the state directory.

Every query runs on one thread of its own, never on the event loop, and every row belongs to an owner: the sha256
of the API key that wrote it ("" on a server without keys). The key itself is never stored. A conversation is a
tree of messages (an edit or a regeneration adds a sibling branch; ``leaf`` names the branch on screen), so writes
only add or update single rows and two tabs writing at once lose nothing.

A file that cannot be opened as a database (corrupt, locked, on a read-only disk) is left exactly as it is: the
error is logged and every call raises :class:`StoreUnavailable` with it, while chat goes on without the store.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger("mlxd.web")
T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, title TEXT NOT NULL, leaf TEXT,
    created REAL NOT NULL, updated REAL NOT NULL);
CREATE INDEX IF NOT EXISTS conversations_owner ON conversations(owner, updated);
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL, conversation TEXT NOT NULL, owner TEXT NOT NULL,
    parent TEXT, role TEXT NOT NULL, body TEXT NOT NULL, created REAL NOT NULL,
    UNIQUE (conversation, id));
"""
BUSY_TIMEOUT_S = 2.0


class StoreUnavailable(Exception):
    """The database cannot serve this call; the message says why (shown in the page and logged)."""


class NotFound(Exception):
    """No such conversation for this owner (an unknown id and another key's id are the same)."""


def new_id() -> str:
    return uuid.uuid4().hex


class ConversationStore:
    """The store over one SQLite file; ``open()`` once, then the async methods from the event loop."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.error: str | None = None
        self._db: sqlite3.Connection | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlxd-webui-store")

    # -- lifecycle ------------------------------------------------------------------------------------------
    def open(self) -> None:
        """Open (or create) the file on the store's thread; on failure record the error, touch nothing."""
        self._pool.submit(self._open).result()

    def _open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            try:
                db.execute("PRAGMA foreign_keys = ON")
                existing = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                if not existing:
                    db.executescript(SCHEMA)
                else:
                    self._check_schema(db)
            except sqlite3.Error:
                db.close()
                raise
            self._db = db
            log.info("conversation store: %s", self.path)
        except (OSError, sqlite3.Error) as exc:
            self.error = f"conversation store {self.path} unavailable: {exc}"
            log.error("%s; the chat page keeps working without it and the file is left untouched", self.error)

    @staticmethod
    def _check_schema(db: sqlite3.Connection) -> None:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"conversations", "messages"} <= tables:
            raise sqlite3.DatabaseError(f"not mlxd's conversation store (tables: {', '.join(sorted(tables))})")
        ok = db.execute("PRAGMA quick_check").fetchone()[0]
        if ok != "ok":
            raise sqlite3.DatabaseError(f"integrity check failed: {ok}")

    def close(self) -> None:
        def shut() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None
        self._pool.submit(shut).result()
        self._pool.shutdown(wait=True)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(db, *args)`` on the store's thread; a database error becomes StoreUnavailable."""
        def run() -> T:
            if self._db is None:
                raise StoreUnavailable(self.error or "the conversation store is not open")
            try:
                return fn(self._db, *args)
            except sqlite3.Error as exc:
                message = f"conversation store {self.path}: {exc}"
                log.error("%s", message)
                raise StoreUnavailable(message) from exc
        return await asyncio.get_running_loop().run_in_executor(self._pool, run)


# -- queries (each runs on the store's thread with the connection) ----------------------------------------------
def _summary(row: sqlite3.Row | tuple[Any, ...]) -> dict[str, Any]:
    return {"id": row[0], "title": row[1], "leaf": row[2], "created": row[3], "updated": row[4]}


def list_conversations(db: sqlite3.Connection, owner: str, query: str) -> list[dict[str, Any]]:
    cols = "c.id, c.title, c.leaf, c.created, c.updated"
    if not query:
        rows = db.execute(f"SELECT {cols} FROM conversations c WHERE owner = ? ORDER BY updated DESC", (owner,))
        return [_summary(r) for r in rows]
    like = "%" + query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    rows = db.execute(
        f"SELECT {cols} FROM conversations c WHERE c.owner = ? AND (c.title LIKE ? ESCAPE '\\' OR EXISTS ("
        "SELECT 1 FROM messages m WHERE m.conversation = c.id AND m.owner = c.owner AND m.body LIKE ? ESCAPE '\\'))"
        " ORDER BY c.updated DESC", (owner, like, like))
    return [_summary(r) for r in rows]


def _owned(db: sqlite3.Connection, owner: str, cid: str) -> tuple[Any, ...]:
    row = db.execute("SELECT id, title, leaf, created, updated FROM conversations WHERE id = ? AND owner = ?",
                     (cid, owner)).fetchone()
    if row is None:
        raise NotFound(cid)
    return tuple(row)


def get_conversation(db: sqlite3.Connection, owner: str, cid: str) -> dict[str, Any]:
    conv = _summary(_owned(db, owner, cid))
    rows = db.execute("SELECT id, parent, role, body, created FROM messages WHERE conversation = ? AND owner = ? "
                      "ORDER BY seq", (cid, owner))
    conv["messages"] = [{"id": r[0], "parent": r[1], "role": r[2], "created": r[4], **json.loads(r[3])}
                        for r in rows]
    return conv


def create_conversation(db: sqlite3.Connection, owner: str, title: str, cid: str | None = None) -> dict[str, Any]:
    now = time.time()
    cid = cid or new_id()
    if db.execute("SELECT 1 FROM conversations WHERE id = ?", (cid,)).fetchone() is not None:
        cid = new_id()  # an id taken (by anyone) is never overwritten: the conversation gets a fresh one
    db.execute("INSERT INTO conversations (id, owner, title, leaf, created, updated) VALUES (?, ?, ?, NULL, ?, ?)",
               (cid, owner, title, now, now))
    return _summary(_owned(db, owner, cid))


def update_conversation(db: sqlite3.Connection, owner: str, cid: str, title: str | None,
                        leaf: str | None) -> dict[str, Any]:
    _owned(db, owner, cid)
    if title is not None:
        db.execute("UPDATE conversations SET title = ?, updated = ? WHERE id = ?", (title, time.time(), cid))
    if leaf is not None:
        db.execute("UPDATE conversations SET leaf = ?, updated = ? WHERE id = ?", (leaf, time.time(), cid))
    return _summary(_owned(db, owner, cid))


def delete_conversation(db: sqlite3.Connection, owner: str, cid: str) -> None:
    _owned(db, owner, cid)
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("DELETE FROM messages WHERE conversation = ? AND owner = ?", (cid, owner))
        db.execute("DELETE FROM conversations WHERE id = ? AND owner = ?", (cid, owner))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def put_message(db: sqlite3.Connection, owner: str, cid: str, mid: str, parent: str | None, role: str,
                body: dict[str, Any], leaf: bool) -> dict[str, Any]:
    """Add or update one message (the page writes an answer once it has finished streaming)."""
    _owned(db, owner, cid)
    now = time.time()
    text = json.dumps(body, ensure_ascii=False)
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("INSERT INTO messages (id, conversation, owner, parent, role, body, created) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (conversation, id) DO UPDATE SET body = excluded.body",
                   (mid, cid, owner, parent, role, text, now))
        if leaf:
            db.execute("UPDATE conversations SET leaf = ?, updated = ? WHERE id = ?", (mid, now, cid))
        else:
            db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, cid))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return {"id": mid, "parent": parent, "role": role, "created": now, **body}


def import_conversations(db: sqlite3.Connection, owner: str, items: list[dict[str, Any]]) -> list[str]:
    """Each imported conversation gets a fresh id (so nothing stored is overwritten), its messages their own."""
    ids = []
    db.execute("BEGIN IMMEDIATE")
    try:
        for item in items:
            cid = new_id()
            now = time.time()
            db.execute("INSERT INTO conversations (id, owner, title, leaf, created, updated) VALUES (?, ?, ?, ?, ?, ?)",
                       (cid, owner, item["title"], item.get("leaf"), float(item.get("created") or now), now))
            for msg in item["messages"]:
                body = {k: v for k, v in msg.items() if k not in ("id", "parent", "role", "created")}
                db.execute("INSERT OR IGNORE INTO messages (id, conversation, owner, parent, role, body, created) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?)", (msg["id"], cid, owner, msg.get("parent"), msg["role"],
                                                           json.dumps(body, ensure_ascii=False), now))
            ids.append(cid)
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return ids


def export_conversations(db: sqlite3.Connection, owner: str) -> list[dict[str, Any]]:
    ids = [r[0] for r in db.execute("SELECT id FROM conversations WHERE owner = ? ORDER BY updated DESC", (owner,))]
    return [get_conversation(db, owner, cid) for cid in ids]
