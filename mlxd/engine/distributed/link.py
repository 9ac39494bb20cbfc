"""Rank 0's end of the link to its front end: requests in, events out, over a socket the front end handed down.

Messages are ``wire`` pickles of tuples. In: ("submit", id, request), ("cancel", id), ("reasoning_end", id),
("slots", call, debug), ("stop", drain_s). Out: ("ready", facts), ("event", id, event), ("reply", call, value),
("counters", n_decode, n_busy), ("broken", reason). The link ending means the front end has gone: so does rank 0.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from mlxd.engine.batching.handle import RequestHandle
from mlxd.engine.distributed import wire
from mlxd.engine.distributed.channel import StepChannel
from mlxd.engine.types import ErrorEvent
from mlxd.errors import MlxdError, RequestError

log = logging.getLogger("mlxd.engine.distributed.link")

COUNTERS_S = 1.0


class _Link:
    def __init__(self, worker: Any, conn: Connection) -> None:
        self.worker = worker
        self.conn = conn
        self._send_lock = threading.Lock()
        self.handles: dict[int, RequestHandle] = {}

    def send(self, message: tuple[Any, ...]) -> None:
        data = wire.dumps(message)
        with self._send_lock:
            self.conn.send_bytes(data)

    def _relay(self, id_: int, handle: RequestHandle) -> None:
        try:
            for event in handle:
                self.send(("event", id_, event))
        finally:
            self.handles.pop(id_, None)

    def submit(self, id_: int, request: Any) -> None:
        from dataclasses import replace

        from mlxd.engine.sampling.candidates import resolve_seed

        # A random seed is drawn here, once, so that every rank's sampler draws the same numbers.
        sampling = request.sampling
        if hasattr(sampling, "seed") and hasattr(sampling, "model_copy"):
            request = replace(request, sampling=sampling.model_copy(update={"seed": resolve_seed(sampling.seed)}))
        try:
            handle = self.worker.submit(request)
        except RequestError as exc:
            self.send(("event", id_, ErrorEvent(exc.message, exc.type, exc.status)))
            return
        except MlxdError as exc:
            self.send(("event", id_, ErrorEvent(str(exc))))
            return
        self.handles[id_] = handle
        threading.Thread(target=self._relay, args=(id_, handle), name=f"mlxd-link-{id_}", daemon=True).start()

    def counters(self) -> None:
        last = (0, 0)
        while True:
            time.sleep(COUNTERS_S)
            now = self.worker.decode_counter.read()
            if now != last:
                self.send(("counters", *now))
                last = now

    def serve(self) -> None:
        while True:
            message = wire.loads(self.conn.recv_bytes())
            kind = message[0]
            if kind == "submit":
                self.submit(message[1], message[2])
            elif kind in ("cancel", "reasoning_end"):
                handle = self.handles.get(message[1])
                if handle is not None:
                    handle.cancel() if kind == "cancel" else self.worker.end_reasoning(handle)
            elif kind == "slots":
                self.send(("reply", message[1], self.worker.slots(bool(message[2]))))
            elif kind == "stop":
                self.worker.stop(drain_timeout=float(message[1]))
                return


def serve_front_end(worker: Any, channel: StepChannel, shard: str, fd: int) -> int:
    """Start rank 0's worker and serve the front end until it says stop or goes away; the exit code."""
    conn = Connection(fd)
    link = _Link(worker, conn)

    def broken(reason: str) -> None:
        log.error("the group broke: %s", reason)
        try:
            link.send(("broken", reason))
        finally:
            os._exit(4)  # a broken group is never used again; the front end forms a new one

    worker.scheduler.channel = channel
    worker.scheduler.on_broken = broken
    worker.start()
    link.send(("ready", {"shard": shard, "memory_bytes": int(worker.loaded.size_bytes),
                         "kv": worker.kv_cache_info(), "n_ctx_slot": int(worker.n_ctx_slot)}))
    threading.Thread(target=link.counters, name="mlxd-link-counters", daemon=True).start()
    try:
        link.serve()
    except (EOFError, OSError):
        log.warning("the front end has gone; rank 0 ends")
        os._exit(0)
    return 0
