"""The daemon's lifecycle: bind, serve, load the model, notify, and drain on the way out.

The process owns one asyncio loop. Sanic serves the public app on it through ``create_server`` (single process,
so the process systemd watches is the one that owns the MLX models); model work runs on worker threads.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import signal
import time
from typing import TYPE_CHECKING, Any, Callable, cast

from mlxd.daemon.connections import ConnectionLimits, ServingProtocol
from mlxd.daemon.listen import (Listener, bind, connections_cap, import_mlx_lm_keeping_limits,
                                raise_open_files_limit, tls_context)
from mlxd.daemon.notify import Notifier
from mlxd.errors import MlxdError

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from sanic import DefaultSanic, HTTPResponse, Request
    from sanic.server.async_server import AsyncioServer

    Handler = Callable[[Request], Awaitable[None]]

    from mlxd.daemon.controller import Controller
    from mlxd.daemon.router import ModelPool
    from mlxd.daemon.sleep import Sleeper
    from mlxd.api import ServingState
    from mlxd.engine import ServedModel
    from mlxd.config import Config, ResolvedConfig
    from mlxd.web import ConversationStore

log = logging.getLogger("mlxd.daemon")

# How long requests ended by a drain get to write their in-band error before their connections close.
FLUSH_SECONDS = 1.0


class DaemonState(enum.Enum):
    STARTING = "starting"
    SERVING = "serving"
    DRAINING = "draining"
    STOPPED = "stopped"


class InFlight:
    """Counts requests in progress so a drain can wait for them."""

    def __init__(self) -> None:
        self.count = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def enter(self) -> None:
        self.count += 1
        self._idle.clear()

    def leave(self) -> None:
        self.count = max(0, self.count - 1)
        if self.count == 0:
            self._idle.set()

    async def wait_idle(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except TimeoutError:
            return False


class Daemon:
    """One mlxd process: ``serve()`` runs until the shutdown trigger fires or SIGTERM/SIGINT arrives."""

    def __init__(self, resolved: "ResolvedConfig", *, load_model: Callable[["ResolvedConfig"], "ServedModel | None"],
                 log_settings: Callable[[Any], Any], argv: list[str] | None = None,
                 env: dict[str, str] | None = None, notifier: Notifier | None = None,
                 build_info: dict[str, Any] | None = None) -> None:
        self.resolved = resolved
        self.load_model = load_model
        self.log_settings = log_settings
        self.argv = list(argv or [])
        self.env = dict(env or {})
        self.notifier = notifier or Notifier()
        self.build_info = build_info or {}
        self.state = DaemonState.STARTING
        self.shutdown = asyncio.Event()
        self.in_flight = InFlight()
        self.serving: "ServingState | None" = None
        self.controller: "Controller | None" = None
        self._listener: Listener | None = None
        self._admin_listener: Listener | None = None
        self._admin_server: Any = None
        self.webui_store: "ConversationStore | None" = None

    def cache_disk_summary(self) -> dict[str, Any] | None:
        """The prompt cache's disk tier over the process's life, for the admin status (None: never opened)."""
        from mlxd.engine import disk_cache_summary

        return disk_cache_summary()

    def slots_summary(self) -> dict[str, list[dict[str, Any]]] | None:
        """Each loaded model's ``/slots`` entries, for the admin ``GET /v1/slots`` (None: not serving yet)."""
        from mlxd.api import slots_by_model

        return slots_by_model(self.serving) if self.serving is not None else None

    def load_summary(self) -> dict[str, int] | None:
        """``/metrics``'s load counters, for the admin ``GET /v1/metrics/summary`` (None: not serving yet)."""
        from mlxd.api import load_summary

        return load_summary(self.serving) if self.serving is not None else None

    def request_shutdown(self) -> None:
        """Signal-safe: only sets a flag the serve loop waits on."""
        self.shutdown.set()

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> None:
        def on_signal(sig: signal.Signals) -> None:
            if self.shutdown.is_set():
                # b10621's rule: a second SIGTERM/SIGINT ends the process at once, whatever is still running.
                log.warning("received a second %s: terminating immediately", sig.name)
                logging.shutdown()
                os._exit(1)
            log.info("received %s: shutting down", sig.name)
            self.request_shutdown()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)

    async def serve(self, shutdown_trigger: asyncio.Event | None = None) -> int:
        """Run the daemon; returns the process exit status."""
        # First of all: the api imports mlx_lm, whose import-time setrlimit must not run (listen.py says why).
        import_mlx_lm_keeping_limits()
        from mlxd.admin import admin_endpoint
        from mlxd.api import freeze_startup_objects, share_one_heap

        share_one_heap()  # before the model's and the pool's threads allocate
        loop = asyncio.get_running_loop()
        if shutdown_trigger is not None:
            loop.create_task(self._forward(shutdown_trigger))
        self._install_signals(loop)
        # A TCP admin address without a token is refused before anything is bound.
        admin = admin_endpoint(self.resolved.config, self.env)
        server = await self._open_public()
        if admin is not None:
            await self._start_admin(admin)
        frozen = freeze_startup_objects()  # the serving stack is imported; no model is loaded yet
        log.info("%d objects of the serving stack kept out of full garbage collections", frozen)
        what = await self._bring_up(server)
        if what is None:
            return 1
        self.state = DaemonState.SERVING
        loop.add_signal_handler(signal.SIGHUP, self._on_sighup)
        background = [self._start_watching(loop)]
        if self.notifier.watchdog_usec:
            background.append(loop.create_task(self._watchdog()))
        if self.serving is not None and self.serving.sleeper is not None:
            # The serving state types its sleeper and pool by what the routes use; the daemon made the concrete ones.
            background.append(loop.create_task(cast("Sleeper", self.serving.sleeper).watch()))
        assert self._listener is not None
        self.notifier.ready(f"serving {what} on {self._listener.url}")

        await self.shutdown.wait()
        for task in background:
            if task:
                task.cancel()
        await self._drain(server)
        return 0

    async def _open_public(self) -> Any:
        """Bind the public listener and start serving on it; routes answer 503 until a model is in service."""
        open_files = raise_open_files_limit()
        from mlxd.api import ServingState, api_prefix, create_app, gcp
        from mlxd.daemon import sleep

        cfg = self.resolved.config
        tls = tls_context(cfg.ssl_cert_file, cfg.ssl_key_file)
        vertex = gcp.VertexSettings.from_env(self.env)
        port = cfg.port
        if vertex.enabled and port != vertex.port:  # b10621: Vertex AI names the port the container listens on
            log.warning("Google Cloud Platform compat: overriding server port %d with AIP_HTTP_PORT %d", port,
                        vertex.port)
            port = vertex.port
        self._listener = bind(cfg.host, port, tls=tls is not None, reuse_port=cfg.reuse_port)
        self.serving = ServingState(config=cfg, build_info=self.build_info)
        app = create_app(self.serving, name=f"mlxd_{id(self)}")
        gcp.install(app, vertex, api_prefix(cfg), float(cfg.timeout or 3600))
        from mlxd import web

        self.webui_store = web.install(app, self.serving, api_prefix(cfg), self.env)
        self._count_requests(app)
        serving = self.serving

        def limits() -> ConnectionLimits:
            # Read as each connection opens: the options are live, a reload changes the next connections.
            live = serving.config
            return ConnectionLimits(timeout_idle=float(live.timeout_idle), timeout_header=float(live.timeout_header),
                                    timeout=float(live.timeout), connections_max=connections_cap(
                                        int(live.connections_max), open_files))

        app.ctx.connection_limits = limits
        log.info("connections: at most %d open (open files limit %d), header timeout %g s, idle timeout %g s, "
                 "read/write timeout %g s", limits().connections_max, open_files, cfg.timeout_header,
                 cfg.timeout_idle, cfg.timeout)
        sleep.install(app, self.serving)
        server = await app.create_server(sock=self._listener.sock, ssl=tls, access_log=False,
                                         protocol=ServingProtocol, return_asyncio_server=True)
        if server is None:
            raise MlxdError("the HTTP server could not be created")
        await server.startup()
        await server.before_start()
        await server.start_serving()
        await server.after_start()
        log.info("listening on %s", self._listener.url)
        return server

    async def _bring_up(self, server: Any) -> str | None:
        """Startup as a change from nothing to the first configuration, through the controller (generation 1);
        what is served, or None when that failed."""
        from mlxd.daemon.controller import Controller

        assert self.serving is not None
        self.controller = Controller(argv=self.argv, env=self.env, resolved=self.resolved, serving=self.serving,
                                     notifier=self.notifier, load_model=self.load_model,
                                     log_settings=self.log_settings)
        try:
            return await self.controller.start()
        except MlxdError as exc:
            log.error("%s", exc)
            await self._stop_server(server)
            return None

    async def _start_admin(self, endpoint: Any) -> None:
        """The admin listener: its own socket (0600 for a Unix socket) and sanic app, on this loop."""
        from mlxd.admin import create_admin_app

        mode = 0o600 if endpoint.address.is_unix else None
        self._admin_listener = bind(endpoint.bind_host, endpoint.bind_port, option="admin-listen", mode=mode)
        app = create_admin_app(self, token=endpoint.token, name=f"mlxd_admin_{id(self)}")
        server = await app.create_server(sock=self._admin_listener.sock, access_log=False,
                                         return_asyncio_server=True)
        if server is None:
            raise MlxdError("the admin server could not be created")
        await server.startup()
        await server.before_start()
        await server.start_serving()
        await server.after_start()
        self._admin_server = server
        log.info("admin listening on %s", self._admin_listener.url)

    def _on_sighup(self) -> None:
        """SIGHUP: reload from the files; the handler only enqueues the reload."""
        if self.controller is not None and self.state is DaemonState.SERVING:
            asyncio.get_running_loop().create_task(self.controller.reload("sighup"))

    @property
    def running_config(self) -> "Config":
        """The configuration in force: the controller's latest generation (the startup one before it exists)."""
        return self.controller.resolved.config if self.controller is not None else self.resolved.config

    def _start_watching(self, loop: asyncio.AbstractEventLoop) -> "asyncio.Task[None] | None":
        """Watch the TOML and presets files: on by default when --config is given, off with --no-watch-config.

        The files are watched whenever there are any, and each edit asks the running configuration whether to
        reload, so a change of ``watch-config`` (an admin PATCH, a reload) applies to the next edit."""
        from mlxd.daemon.watch import watch_files

        cfg = self.resolved.config
        paths = [p for p in (cfg.config, cfg.models_preset) if p]
        if not paths or self.controller is None:
            return None
        controller = self.controller

        async def on_change(path: str) -> None:
            if not controller.resolved.config.watch_config:
                log.info("%s changed; not reloading (watch-config is off)", path)
                return
            # Shielded: stopping the watcher must not abandon a model load half way (the drain waits for it).
            await asyncio.shield(controller.reload(f"file:{path}"))

        return loop.create_task(watch_files(paths, on_change, self.shutdown))

    async def _forward(self, trigger: asyncio.Event) -> None:
        await trigger.wait()
        self.request_shutdown()

    async def _watchdog(self) -> None:
        interval = self.notifier.watchdog_usec / 2e6
        while True:
            self.notifier.watchdog()
            await asyncio.sleep(interval)

    def _count_requests(self, app: "DefaultSanic") -> None:
        """Count every request from its head to its last byte (a stream's included), and refuse new ones while
        draining.

        Response middleware runs when a stream's headers go out, so it cannot mark a stream's end; the count wraps
        the app's whole request handler instead (through the connections' protocol), which returns once the handler
        and its response are done.
        """
        in_flight = self.in_flight

        def wrap(handle: Handler) -> Handler:
            async def counted(request: Request) -> None:
                in_flight.enter()
                try:
                    await handle(request)
                finally:
                    in_flight.leave()

            return counted

        app.ctx.request_wrapper = wrap  # read by each connection of ServingProtocol as it opens

        async def _refuse_while_draining(request: Request) -> HTTPResponse | None:
            if self.state is DaemonState.DRAINING:
                from mlxd.api import json_error

                response = json_error(503, "the server is shutting down", "unavailable_error")
                response.headers["Connection"] = "close"
                return response
            return None

        app.on_request(_refuse_while_draining, priority=1000)

    async def _drain(self, server: AsyncioServer) -> None:
        """SIGTERM: stop accepting, let every in-flight request (streams to their last byte) finish within
        --shutdown-timeout, end the rest with the in-band error, then free the models and exit."""
        self.state = DaemonState.DRAINING
        timeout = self.running_config.shutdown_timeout  # as configured now: a change applies to the next drain
        self.notifier.stopping("draining")
        log.info("draining: %d request(s) in flight, waiting up to %.0f s", self.in_flight.count, timeout)
        if server.server:
            server.server.close()  # stop accepting; open connections keep being served
        for connection in list(getattr(server, "connections", ())):
            connection.close_if_idle()  # idle keep-alive connections would only bring new work
        pool = self.controller.pool if self.controller is not None else None
        if pool is not None:
            pool.end_streams()  # /models/sse readers: ending their streams changes no state
        started = time.monotonic()
        drained = await self.in_flight.wait_idle(timeout)
        if not drained:
            log.warning("drain timed out with %d request(s) in flight; ending them", self.in_flight.count)
        # Past the deadline the workers stop at once: what still runs gets the in-band error (a stream's last
        # frame, or the error envelope), which the handlers get a moment to write before the sockets close.
        if self.controller is not None:
            await self.controller.close()  # a change in progress lands; replaced and router models are freed
        model = self.serving.model if self.serving else None
        if model is not None:
            # What is left of --shutdown-timeout goes to writing the prompt cache to its disk tier (if any).
            await asyncio.to_thread(model.worker.stop, 0.0, max(0.0, timeout - (time.monotonic() - started)))
            log.info("model %s stopped", model.name)
        if not drained and not await self.in_flight.wait_idle(FLUSH_SECONDS):
            log.warning("%d request(s) still open after the in-band error; closing them", self.in_flight.count)
        await self._stop_server(server)
        if self.webui_store is not None:  # after the last request: no store call can still be queued
            await asyncio.to_thread(self.webui_store.close)
        self.state = DaemonState.STOPPED
        log.info("stopped")

    async def _stop_server(self, server: AsyncioServer) -> None:
        await _close(server)
        if self._listener:
            self._listener.close()
        admin, self._admin_server = self._admin_server, None
        if admin is not None:  # the admin listener answers status until the very end
            await _close(admin)
            if self._admin_listener:
                self._admin_listener.close()


async def _close(server: AsyncioServer) -> None:
    """Stop a sanic server: no new connections, open ones closed, its stop hooks run."""
    await server.before_stop()
    task = server.close()
    if task is not None:
        try:
            await asyncio.wait_for(task, 5)
        except TimeoutError:
            pass
    for connection in list(server.connections):
        # By now every request had its time (the drain ran first): what remains is closed, busy or not.
        connection.close()
    await server.after_stop()
