"""The front end's model worker for a distributed model: the face the api uses for a local worker (submit,
events, cancel, end of reasoning, slots), served by the group's rank 0 over a local socket (link.py).

The group behind it may come and go (group.py): while it is down, ``submit`` answers 503 with a reason naming the
lost peer, and ``fail_all`` ends every request in flight with b10621's in-band error at once.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from concurrent.futures import Future
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from mlxd.engine.batching.counters import DecodeCounter
from mlxd.engine.batching.handle import RequestHandle
from mlxd.engine.batching.worker import ModelWorker
from mlxd.engine.constraints import Constraints
from mlxd.engine.distributed import wire
from mlxd.engine.distributed.replicate import portable
from mlxd.engine.loading.lora import LoraSet
from mlxd.engine.settings import WorkerSettings
from mlxd.engine.types import ErrorEvent, Event, FinalEvent, GenerationRequest
from mlxd.errors import ContextOverflow, EngineError, InvalidRequest, QueueFull, Unavailable

log = logging.getLogger("mlxd.engine.distributed.remote")

NOT_DISTRIBUTED = "is not yet served by a model split across machines (--rpc)"
SLOTS_WAIT_S = 0.5


class GroupDown(Unavailable):
    """The group is down or forming: 503, with a time to retry (it re-forms by itself)."""

    retry_after = 2


class _Counter(DecodeCounter):
    def set(self, n_decode: int, n_busy: int) -> None:
        with self._lock:
            self._n_decode, self._n_busy_slots = n_decode, n_busy


class RemoteWorker(ModelWorker):
    """A ModelWorker whose thread is another process: rank 0 of the group (never built with ModelWorker's
    constructor: it holds no model)."""

    def __init__(self, loaded: Any, settings: WorkerSettings) -> None:  # noqa: super().__init__ builds a model's
        self.loaded = loaded
        self.draft = None
        self.settings = settings
        self.n_ctx_slot = settings.n_ctx_slot(int(loaded.n_ctx_train))
        self.constraints = Constraints(loaded.tokenizer, int(loaded.vocab_size), sorted(loaded.eos_token_ids))
        self.lora = LoraSet.empty()
        self._kv_info: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._conn: Connection | None = None
        self._handles: dict[int, RequestHandle] = {}
        self._calls: dict[int, Future[Any]] = {}
        self._ids = itertools.count(1)
        self._counter = _Counter()
        self.down_reason: str | None = "the group is forming"
        self._stopped = False
        self._last_slots: list[dict[str, Any]] | None = None
        self.group: Any = None  # the Group serving this worker (group.py), closed when the worker stops

    # -- the group's side (group.py) ----------------------------------------------------------------------
    def attach(self, conn: Connection, facts: dict[str, Any]) -> None:
        """Serve from the rank-0 process behind ``conn`` (its ``ready`` facts); reads its messages on a thread."""
        with self._lock:
            self._conn, self.down_reason = conn, None
            self._kv_info = dict(facts.get("kv") or {})
        threading.Thread(target=self._read, args=(conn,), name="mlxd-remote-worker", daemon=True).start()

    def fail_all(self, reason: str) -> None:
        """The group is gone: refuse new requests and end every one in flight with ``reason``."""
        with self._lock:
            self.down_reason = reason
            conn, self._conn = self._conn, None
            handles, self._handles = self._handles, {}
            calls, self._calls = self._calls, {}
        for handle in handles.values():
            handle.push(ErrorEvent(f"the distributed model lost a member: {reason}", "unavailable_error", 503))
        for call in calls.values():
            call.set_exception(Unavailable(reason))
        if conn is not None:
            conn.close()

    def _read(self, conn: Connection) -> None:
        try:
            while True:
                message = wire.loads(conn.recv_bytes())
                kind = message[0]
                if kind == "event":
                    self._deliver(message[1], message[2])
                elif kind == "reply":
                    call = self._calls.pop(message[1], None)
                    if call is not None:
                        call.set_result(message[2])
                elif kind == "counters":
                    self._counter.set(message[1], message[2])
                elif kind == "broken":
                    self.fail_all(f"rank 0 reported: {message[1]}")
                    return
        except (EOFError, OSError):
            if self._conn is conn:
                self.fail_all("the rank-0 process ended")

    def _deliver(self, id_: int, event: Event) -> None:
        with self._lock:
            handle = self._handles.get(id_)
            if handle is not None and isinstance(event, (FinalEvent, ErrorEvent)):
                del self._handles[id_]
        if handle is not None:
            handle.push(event)

    def _send(self, message: tuple[Any, ...]) -> None:
        conn = self._conn
        if conn is None:
            raise GroupDown(f"the distributed model is not serving: {self.down_reason}")
        data = wire.dumps(message)
        with self._lock:
            conn.send_bytes(data)

    # -- the api's side -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Nothing to start here: the group's processes are the worker (group.py starts them)."""

    def stop(self, drain_timeout: float = 0.0, spill_timeout: float | None = None) -> None:
        """Refuse new requests, let running ones finish for up to ``drain_timeout`` seconds, then end the group."""
        self._stopped = True
        deadline = time.monotonic() + max(0.0, drain_timeout)
        while self._handles and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            self._send(("stop", 0.0))
        except (Unavailable, OSError):
            pass
        if self.group is not None:
            self.group.close()

    @property
    def running(self) -> bool:
        return self._conn is not None and not self._stopped

    def submit(self, request: GenerationRequest) -> RequestHandle:
        n_prompt = len(request.prompt_tokens)
        if n_prompt >= self.n_ctx_slot:
            raise ContextOverflow(n_prompt, self.n_ctx_slot)
        if request.id_slot >= self.settings.n_parallel:
            raise InvalidRequest("Invalid slot ID")
        if request.media is not None:
            raise InvalidRequest(f"images and audio {NOT_DISTRIBUTED}")
        if request.t_max_predict_ms > 0:
            # Every rank must end a request at the same step; a wall-clock limit would end it on rank 0 alone.
            raise InvalidRequest(f"t_max_predict_ms {NOT_DISTRIBUTED}; use n_predict")
        with self._lock:
            if self._conn is None or self._stopped:
                raise GroupDown(f"the distributed model is not serving: {self.down_reason or 'stopping'}")
            if len(self._handles) >= self.settings.n_parallel + self.settings.queue_max:
                raise QueueFull("server busy: every slot is in use and the queue is full; retry later")
            id_ = next(self._ids)
            handle = RequestHandle(request, id_, self._cancel)
            self._handles[id_] = handle
        try:
            self._send(("submit", id_, portable(request)))
        except OSError as exc:
            raise GroupDown(f"the distributed model is not serving: {exc}") from exc
        return handle

    def _cancel(self, handle: RequestHandle) -> None:
        try:
            self._send(("cancel", handle.id_task))
        except (Unavailable, OSError):
            pass

    def end_reasoning(self, handle: RequestHandle) -> None:
        self._send(("reasoning_end", handle.id_task))

    def slots(self, debug: bool = False) -> list[dict[str, Any]]:
        """Rank 0's slots. The api reads them on its event loop, so the wait is short: a rank 0 that does not answer
        in time (a group about to be found broken) gives the last answer it gave."""
        call: Future[Any] = Future()
        id_ = next(self._ids)
        self._calls[id_] = call
        self._send(("slots", id_, debug))
        try:
            result: list[dict[str, Any]] = call.result(timeout=SLOTS_WAIT_S)
        except TimeoutError:
            self._calls.pop(id_, None)
            if self._last_slots is None:
                raise GroupDown("the distributed model's rank 0 did not answer") from None
            return self._last_slots
        self._last_slots = result
        return result

    @property
    def n_in_flight(self) -> int:
        return len(self._handles)

    @property
    def decode_counter(self) -> DecodeCounter:
        return self._counter

    def kv_cache_info(self) -> dict[str, Any]:
        return dict(self._kv_info)

    def speculative_info(self) -> dict[str, Any] | None:
        return None

    def lora_adapters(self) -> list[dict[str, Any]]:
        return []

    def set_lora_scales(self, scales: dict[int, float]) -> None:
        if any(scales.values()):
            raise EngineError(f"LoRA adapters {NOT_DISTRIBUTED}")

    def embeddings(self, inputs: list[list[int]], pooling: str, embd_normalize: int,
                   rows: tuple[int, int] | None = None) -> Future[Any]:
        raise InvalidRequest(f"embeddings {NOT_DISTRIBUTED}")

    def erase_slot(self, id_slot: int) -> int:
        raise InvalidRequest(f"slot actions {NOT_DISTRIBUTED}")

    def save_slot(self, id_slot: int, path: Path) -> int:
        raise InvalidRequest(f"slot actions {NOT_DISTRIBUTED}")

    def restore_slot(self, id_slot: int, path: Path) -> int:
        raise InvalidRequest(f"slot actions {NOT_DISTRIBUTED}")
