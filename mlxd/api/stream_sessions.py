"""Resumable streams: a streamed generation sent with ``X-Conversation-Id`` outlives its connection.

Its SSE bytes are kept in a session, so a client that lost the connection re-attaches with
``GET /v1/stream?conv_id=ID&from=OFFSET`` (the bytes from that offset, then the live tail), asks which sessions
exist with ``POST /v1/streams/lookup``, and stops one with ``DELETE /v1/stream?conv_id=ID``. A session keeps at
most ``MAX_BYTES`` (older bytes are dropped; resuming below them is refused) and is forgotten ``KEEP_SECONDS``
after it ended.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

from sanic import Request

from mlxd.api import sse
from mlxd.errors import InvalidRequest, NotFound

MAX_BYTES = 8 * 1024 * 1024
MAX_SESSIONS = 256
KEEP_SECONDS = 600.0
HEADER = "x-conversation-id"


def _now_ms() -> int:
    return int(time.time() * 1000)


class StreamSession:
    """One stream's bytes so far, whether it ended, and how to stop its generation."""

    def __init__(self, conversation_id: str, cancel: Callable[[], Any]) -> None:
        self.conversation_id = conversation_id
        self.cancel = cancel
        self.started_at = _now_ms()
        self.completed_at = 0
        self.done = False
        self.dropped = 0  # bytes cut from the front to stay within MAX_BYTES
        self._data = bytearray()
        self._changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    @property
    def total_bytes(self) -> int:
        return self.dropped + len(self._data)

    def append(self, chunk: bytes) -> None:
        self._data += chunk
        excess = len(self._data) - MAX_BYTES
        if excess > 0:
            del self._data[:excess]
            self.dropped += excess
        self._changed.set()

    def finish(self) -> None:
        if not self.done:
            self.done = True
            self.completed_at = _now_ms()
        self._changed.set()

    def info(self) -> dict[str, Any]:
        """The session as ``/v1/streams/lookup`` lists it."""
        return {"conversation_id": self.conversation_id, "is_done": self.done, "total_bytes": self.total_bytes,
                "started_at": self.started_at, "completed_at": self.completed_at}

    async def tail(self, offset: int) -> AsyncIterator[str]:
        """The bytes from ``offset`` on, then each new piece as it comes, until the stream ended."""
        position = offset
        while True:
            if position < self.dropped:
                raise InvalidRequest(f"offset {position} is below the dropped prefix ({self.dropped} bytes)")
            start = position - self.dropped
            if start < len(self._data):
                piece = bytes(self._data[start:])
                position += len(piece)
                yield piece.decode("utf-8", errors="replace")
                continue
            if self.done:
                return
            self._changed.clear()
            await self._changed.wait()


class StreamSessions:
    """The sessions of one app."""

    def __init__(self) -> None:
        self._sessions: dict[str, StreamSession] = {}

    def _forget_old(self) -> None:
        now = _now_ms()
        for key, session in list(self._sessions.items()):
            if session.done and now - session.completed_at > KEEP_SECONDS * 1000:
                del self._sessions[key]
        finished = sorted((s for s in self._sessions.values() if s.done), key=lambda s: s.completed_at)
        while len(self._sessions) >= MAX_SESSIONS and finished:
            del self._sessions[finished.pop(0).conversation_id]

    def start(self, conversation_id: str, cancel: Callable[[], Any]) -> StreamSession:
        """A new session under ``conversation_id``; a running one under the same id is stopped and replaced."""
        self._forget_old()
        previous = self._sessions.get(conversation_id)
        if previous is not None and not previous.done:
            previous.cancel()
        session = self._sessions[conversation_id] = StreamSession(conversation_id, cancel)
        return session

    def get(self, conversation_id: str) -> StreamSession:
        session = self._sessions.get(conversation_id)
        if session is None:
            raise NotFound(f"no stream session for conversation '{conversation_id}'")
        return session

    def lookup(self, conversation_ids: list[str]) -> list[dict[str, Any]]:
        self._forget_old()
        return [self._sessions[c].info() for c in conversation_ids if c in self._sessions]

    def delete(self, conversation_id: str) -> None:
        """Stop the session's generation and forget it."""
        session = self.get(conversation_id)
        session.cancel()
        del self._sessions[conversation_id]


def sessions(request: Request) -> StreamSessions:
    """The app's sessions (created on first use)."""
    ctx = request.app.ctx
    store = getattr(ctx, "stream_sessions", None)
    if store is None:
        store = ctx.stream_sessions = StreamSessions()
    return store


async def _produce(session: StreamSession, frames: AsyncIterable[str],
                   on_error: Callable[[BaseException], str]) -> None:
    try:
        async for frame in frames:
            session.append(frame.encode("utf-8"))
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the generation failed: the error is the stream's last frame, as sse.stream sends it
        session.append(on_error(exc).encode("utf-8"))
    finally:
        session.finish()


async def respond(request: Request, frames: AsyncIterable[str], *, cancel: Callable[[], Any],
                  ping: float | None, on_error: Callable[[BaseException], str] = sse.error_frame) -> None:
    """Stream ``frames``; with ``X-Conversation-Id`` the generation is kept in a session and a lost connection
    does not cancel it (``DELETE /v1/stream`` does)."""
    conversation_id = request.headers.get(HEADER, "").strip()
    if not conversation_id:
        await sse.stream(request, frames, on_disconnect=cancel, ping=ping, on_error=on_error)
        return
    session = sessions(request).start(conversation_id, cancel)
    session.task = asyncio.create_task(_produce(session, frames, on_error))
    await sse.stream(request, session.tail(0), ping=ping, on_error=on_error)
