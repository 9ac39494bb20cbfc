"""One log line per request (``-v``, ``--log-verbosity 4``), and one per generated token at ``--log-verbosity 5``.

llama-server logs each task's slot and timings; this is mlxd's equivalent, at the end of each request: the route,
the status, the tokens of its generations and their timings. A streamed response's line is written when its stream
ends (``sse.stream``), a whole one's when it goes out (the response middleware). The record of the request in
hand lives in a context variable: the route handler, the generation reader and any task they start see the same one.
"""

from __future__ import annotations

import contextvars
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from sanic import HTTPResponse, Request, Sanic

log = logging.getLogger("mlxd.api.requests")

# The level of per-token lines; mlxd.daemon.logs maps --log-verbosity 5 and above to it (tests pin the two).
TOKEN_LEVEL = 5


@dataclass
class RequestRecord:
    """What one request's generations did, summed over them (a request may run several: prompts times n_cmpl)."""

    method: str
    path: str
    started: float = field(default_factory=time.perf_counter)
    streamed: bool = False
    written: bool = False
    generations: int = 0
    prompt_n: int = 0
    cache_n: int = 0
    predicted_n: int = 0
    prompt_ms: float = 0.0
    predicted_ms: float = 0.0
    draft_n: int = 0
    draft_accepted: int = 0
    slots: list[int] = field(default_factory=list)

    def line(self, status: int | str) -> str:
        elapsed = (time.perf_counter() - self.started) * 1e3
        text = f"{self.method} {self.path} {status} in {elapsed:.1f} ms"
        if not self.generations:
            return text
        pps = 1e3 * self.prompt_n / self.prompt_ms if self.prompt_ms > 0 else 0.0
        gps = 1e3 * self.predicted_n / self.predicted_ms if self.predicted_ms > 0 else 0.0
        slots = ",".join(str(s) for s in self.slots)
        text += (f": slot {slots}, prompt {self.prompt_n} tokens ({self.cache_n} cached, {self.prompt_ms:.1f} ms, "
                 f"{pps:.1f} t/s), predicted {self.predicted_n} tokens ({self.predicted_ms:.1f} ms, {gps:.1f} t/s)")
        if self.generations > 1:
            text += f", {self.generations} generations"
        if self.draft_n:
            text += f", draft {self.draft_accepted}/{self.draft_n} accepted"
        return text


_current: contextvars.ContextVar[RequestRecord | None] = contextvars.ContextVar("mlxd_request", default=None)


def enabled() -> bool:
    return log.isEnabledFor(logging.DEBUG)


def on_final(final: Any) -> None:
    """A generation of the request in hand ended (``FinalEvent``)."""
    record = _current.get()
    if record is None:
        return
    t = final.timings
    record.generations += 1
    record.prompt_n += t.prompt_n
    record.cache_n += t.cache_n
    record.predicted_n += t.predicted_n
    record.prompt_ms += t.prompt_ms
    record.predicted_ms += t.predicted_ms
    record.draft_n += t.draft_n
    record.draft_accepted += t.draft_n_accepted
    record.slots.append(final.id_slot)


def on_token(token: Any) -> None:
    """A token of the request in hand arrived (``TokenEvent``): a line at ``TOKEN_LEVEL``."""
    if log.isEnabledFor(TOKEN_LEVEL):
        record = _current.get()
        where = f"{record.method} {record.path}" if record is not None else "request"
        log.log(TOKEN_LEVEL, "%s: token %d id %d %r", where, token.index, token.token_id, token.text)


def streaming(request: Request) -> None:
    """The route streams its answer: the line waits for the stream's end (``stream_ended``)."""
    record = getattr(request.ctx, "request_log", None)
    if record is not None:
        record.streamed = True


def stream_ended(request: Request, status: int, finished: bool) -> None:
    record = getattr(request.ctx, "request_log", None)
    if record is not None:
        _write(record, status if finished else f"{status} (client gone)")


def _write(record: RequestRecord, status: int | str) -> None:
    if not record.written:
        record.written = True
        log.debug("%s", record.line(status))


def install(app: Sanic) -> None:
    """Start a record for each request (first of the request middleware) and write whole responses' lines."""

    async def begin(request: Request) -> None:
        if enabled():
            record = RequestRecord(request.method, request.path)
            request.ctx.request_log = record
            _current.set(record)

    async def end(request: Request, response: HTTPResponse) -> None:
        record = getattr(request.ctx, "request_log", None)
        if record is not None and not record.streamed:
            _write(record, response.status)

    app.on_request(begin, priority=1000)
    app.on_response(end, priority=-1000)
