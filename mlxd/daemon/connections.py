"""The public listener's connections: sanic's HTTP/1.1 protocol with the daemon's own request accounting.

``ServingProtocol`` is handed to ``create_server(protocol=...)``; each connection it serves runs requests through
``app.ctx.request_wrapper`` when the daemon set one (the drain's in-flight count), so a request is counted from its
head to the last byte of its response, a stream's included.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from sanic.server.protocols.http_protocol import HttpProtocol

RequestHandler = Callable[[Any], Awaitable[None]]


class ServingProtocol(HttpProtocol):
    """One connection of the public listener."""

    def _setup(self) -> None:
        super()._setup()
        wrap: Callable[[RequestHandler], RequestHandler] | None = getattr(self.app.ctx, "request_wrapper", None)
        if wrap is not None:
            self.request_handler = wrap(self.request_handler)
