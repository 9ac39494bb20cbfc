"""The public app served in this process on 127.0.0.1 (port 0), over a real tiny model and worker.

Tests swap ``state.config`` to try options: the app reads the configuration per request, as it does when the
daemon reconciles a change.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
from sanic import Sanic

from mlxd.api.app import create_app
from mlxd.api.state import ServingState
from mlxd.engine import ServedModel
from mlxd.config import Config
from mlxd.engine.chat.templates import load_chat_template
from mlxd.engine.sampling.params import SamplingParams
from mlxd.engine.settings import WorkerSettings
from mlxd.engine.batching.worker import ModelWorker


def served_model(loaded: Any, *, parallel: int = 2, ctx_size: int = 512) -> ServedModel:
    """A started worker over ``loaded`` (stop it with ``served.worker.stop()``)."""
    worker = ModelWorker(loaded, WorkerSettings(parallel=parallel, ctx_size=ctx_size))
    worker.start()
    return ServedModel(
        name=loaded.name,
        aliases=[loaded.name],
        loaded=loaded,
        worker=worker,
        chat_template=load_chat_template(loaded.path),
        sampling_defaults=SamplingParams(),
    )


@contextlib.contextmanager
def serving_in_process(loaded: Any, *, parallel: int = 2, ctx_size: int = 512,
                       config: Config | None = None) -> Iterator["AppServer"]:
    """The app over a started worker for ``loaded`` (``config`` defaults to the same parallel and ctx-size);
    the app, then the worker, stop when the block ends."""
    served = served_model(loaded, parallel=parallel, ctx_size=ctx_size)
    server = AppServer(ServingState(config=config or Config(parallel=parallel, ctx_size=ctx_size), model=served))
    try:
        yield server
    finally:
        server.stop()
        served.worker.stop()


class AppServer:
    """The app on its own event loop in a background thread."""

    _counter = 0

    def __init__(self, state: ServingState, *, app: Sanic | None = None, **app_kwargs: Any) -> None:
        AppServer._counter += 1
        self.state = state
        self.app = app or create_app(state, name=f"mlxd_test_{AppServer._counter}", **app_kwargs)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.base_url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.loop = asyncio.new_event_loop()
        self._server: Any = None
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        if not ready.wait(30):
            raise RuntimeError("the app did not start")

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)

        async def start() -> None:
            self._server = await self.app.create_server(sock=self.sock, access_log=False,
                                                        return_asyncio_server=True)
            await self._server.startup()
            await self._server.before_start()
            await self._server.start_serving()
            await self._server.after_start()

        self.loop.run_until_complete(start())
        ready.set()
        self.loop.run_forever()

    def stop(self) -> None:
        async def close() -> None:
            await self._server.before_stop()
            task = self._server.close()
            if task is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(task, 5)
            for connection in list(self._server.connections):
                connection.close_if_idle()
            await self._server.after_stop()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.sock.close()

    def client(self, timeout: float = 60) -> httpx.Client:
        """An HTTP client for the app (use it in a ``with`` block)."""
        return httpx.Client(base_url=self.base_url, timeout=timeout)

    @contextlib.contextmanager
    def options(self, **values: Any) -> Iterator[Config]:
        """Serve with ``Config(**values)`` for the duration of the block."""
        previous = self.state.config
        self.state.config = Config(**values)
        try:
            yield self.state.config
        finally:
            self.state.config = previous
