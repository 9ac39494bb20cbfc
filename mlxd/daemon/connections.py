"""The public listener's connections: sanic's HTTP/1.1 protocol with the daemon's request accounting, its own
timeouts and a cap on open connections.

``ServingProtocol`` is handed to ``create_server(protocol=...)``. Each connection reads, when it opens,

- ``app.ctx.request_wrapper``: wraps the request handler (the drain's in-flight count, so a request is counted
  from its head to the last byte of its response, a stream's included);
- ``app.ctx.connection_limits``: a callable returning the ``ConnectionLimits`` in force (they are live options).

Timeouts, per connection: ``--timeout-idle`` between requests (a fresh connection that sends nothing included),
``--timeout-header`` from a request's first byte to the end of its head (a deadline: trickling bytes does not
extend it), and ``--timeout`` as b10621 means it: how long one read or one write may stall (a stalled head or body
is answered 408, a client that stopped reading is disconnected). A handler that
computes for an hour (a long non-streamed generation) is never cut.

At ``--connections-max`` open connections, a new one first takes the place of the connection idle the longest
(between requests, or still sending its head); when every connection is busy it is answered 503 and closed.
"""

from __future__ import annotations

import logging
from time import monotonic
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from sanic.exceptions import RequestCancelled, RequestTimeout, ServiceUnavailable
from sanic.http.constants import Stage
from sanic.server.protocols.http_protocol import HttpProtocol

from mlxd.json_out import dumps

log = logging.getLogger("mlxd.daemon")

RequestHandler = Callable[[Any], Awaitable[None]]


@dataclass(frozen=True)
class ConnectionLimits:
    """The connection options in force."""

    timeout_idle: float = 5.0
    timeout_header: float = 10.0
    timeout: float = 3600.0
    connections_max: int = 4096

    @property
    def tick(self) -> float:
        """How often a connection checks its timeouts (each is off at 0)."""
        shortest = min((t for t in (self.timeout_idle, self.timeout_header, self.timeout) if t > 0), default=10.0)
        return min(5.0, max(0.25, shortest / 2))


_BUSY_BODY = dumps({"error": {"code": 503, "message": "too many open connections; retry later",
                              "type": "unavailable_error"}}).encode()
BUSY_RESPONSE = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\n"
                 b"Content-Length: " + str(len(_BUSY_BODY)).encode() + b"\r\nConnection: close\r\n"
                 b"Retry-After: 1\r\n\r\n" + _BUSY_BODY)


def _idle_since(connection: Any) -> float | None:
    """When ``connection`` last did anything, if it is waiting between requests or still sending its head."""
    http = connection.http
    if http is None or http.stage in (Stage.IDLE, Stage.REQUEST):
        return float(connection._time)
    return None


class ServingProtocol(HttpProtocol):
    """One connection of the public listener."""

    # sanic's protocol classes get slots from their metaclass: new attributes must be declared.
    __slots__ = ("limits", "refused", "head_started", "send_signal")

    def _setup(self) -> None:
        super()._setup()
        wrap: Callable[[RequestHandler], RequestHandler] | None = getattr(self.app.ctx, "request_wrapper", None)
        if wrap is not None:
            self.request_handler = wrap(self.request_handler)
        limits: Callable[[], ConnectionLimits] | None = getattr(self.app.ctx, "connection_limits", None)
        self.limits = limits() if limits is not None else ConnectionLimits()
        self.refused = False
        self.head_started = 0.0
        self.send_signal = any(route.name == "http.lifecycle.send" for route in self.app.signal_router.routes)

    async def send(self, data: bytes) -> None:
        """sanic's ``send`` (wait while the client is not reading, then write), without the ``http.lifecycle.send``
        signal while nothing listens to it: sanic dispatches it for every chunk, a signal-router lookup that raises
        and catches NotFound, about a tenth of the event loop's work per streamed token. Sanic's TouchUp would take
        the dispatch out, but it is off for mlxd's apps (api.app: it breaks with several apps in one process)."""
        if self.send_signal:
            return await super().send(data)
        await self._can_write.wait()
        transport = self.transport
        if transport is None or transport.is_closing():
            raise RequestCancelled
        transport.write(data)
        self._time = monotonic()

    # -- the cap ----------------------------------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        if len(self.connections) >= self.limits.connections_max and not self._evict_one():
            self.refused = True
            self.transport = transport
            transport.write(BUSY_RESPONSE)
            transport.close()
            _note_refusal(self.limits.connections_max)
            return
        super().connection_made(transport)

    def _evict_one(self) -> bool:
        """Close the connection idle the longest to make room; False when every connection is busy."""
        candidates = [(since, c) for c in self.connections if (since := _idle_since(c)) is not None]

        if not candidates:
            return False
        _, victim = min(candidates, key=lambda item: item[0])
        self.connections.discard(victim)
        victim.close()
        return True

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.refused:
            return
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        http = self._http if hasattr(self, "_http") else None
        if http is None or http.stage is Stage.IDLE:
            self.head_started = monotonic()  # a new request's first bytes: its head's deadline starts
        super().data_received(data)

    # -- timeouts ---------------------------------------------------------------------------------------------
    def check_timeouts(self) -> None:
        """Runs every ``tick`` seconds while the connection lives; cancels it when a timeout has passed."""
        try:
            if not self._task or self._http is None:
                return
            now = monotonic()  # the clock sanic keeps self._time on
            stage = self._http.stage
            limits = self.limits
            stalled = now - self._time
            if stage is Stage.IDLE:
                if limits.timeout_idle and stalled > limits.timeout_idle:
                    return self._cancel(None)
            elif stage is Stage.REQUEST:
                late = limits.timeout_header and now - (self.head_started or self._time) > limits.timeout_header
                if late or (limits.timeout and stalled > limits.timeout):
                    return self._cancel(RequestTimeout("Request Timeout"))
            elif self._http.upgrade_websocket:
                return
            elif limits.timeout and stalled > limits.timeout:
                if not self._data_received.is_set():  # waiting on the client for body bytes
                    return self._cancel(RequestTimeout("Request Timeout"))
                if not self._can_write.is_set():  # the client stopped reading what is sent
                    return self._cancel(ServiceUnavailable("Response Timeout"))
            self._callback_check_timeouts = self.loop.call_later(limits.tick, self.check_timeouts)
        except Exception:  # a timer must never take the loop down; the connection keeps its previous state
            log.exception("connection timeout check failed")

    def _cancel(self, exception: Exception | None) -> None:
        if exception is not None and self._http is not None:
            self._http.exception = exception
        if self._task is not None:
            self._task.cancel()


def _note_refusal(cap: int) -> None:
    # One line per refusal would let a flood write the log; the rate limiter of daemon.logs folds repeats.
    log.warning("refused a connection: %d connections are open and busy (--connections-max)", cap)
