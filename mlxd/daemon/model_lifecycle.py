"""The models' lifecycle as the one writer records it: loading, loaded, draining, unloaded, failed.

A mixin of ``Controller`` (mlxd.daemon.controller): loading a model on a worker thread, and retiring a replaced one
in the background until its in-flight generations finish, each step recorded in ``model_states`` and published on
``/events``. It reads the serving state and never assigns it (the controller swaps models in and out).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Coroutine

from mlxd.config import ResolvedConfig
from mlxd.daemon.events import EventBus
from mlxd.daemon.logs import redact
from mlxd.daemon.served import model_label
from mlxd.errors import MlxdError
from mlxd.schemas.admin import ModelStateName

if TYPE_CHECKING:
    from mlxd.api import ServingState
    from mlxd.engine import ServedModel

log = logging.getLogger("mlxd.daemon.reconcile")


class ModelLifecycle:
    """Loads and retirements, with their recorded states."""

    # Provided by the Controller this is mixed into.
    events: EventBus
    serving: "ServingState"
    load_model: Callable[[ResolvedConfig], "ServedModel | None"]
    model_states: dict[str, tuple[ModelStateName, str | None]]
    _retiring: set[asyncio.Task[None]]

    def model_state(self, name: str, state: ModelStateName, error: str | None = None) -> None:
        """Record a model's state (loading, loaded, draining, unloaded, failed) and publish it as an event."""
        name, error = redact(name), (redact(error) if error else None)
        self.model_states[name] = (state, error)
        self.events.publish("model", name=name, state=state, **({"error": error} if error else {}))

    async def _load(self, desired: ResolvedConfig, why: str = "") -> "ServedModel | None":
        """Load the model ``desired`` names on a worker thread, recording its state as it goes."""
        label = model_label(desired.config)
        if label:
            self.model_state(label, "loading")
        started = time.monotonic()
        try:
            served = await asyncio.to_thread(self.load_model, desired)
        except MlxdError as exc:
            if label:
                self.model_state(label, "failed", str(exc))
            raise
        if served is not None:
            log.info("model %s loaded%s in %.2f s", served.name, why, time.monotonic() - started)
            self.model_states.pop(served.name, None)
            self.model_states.pop(label or served.name, None)
            self.events.publish("model", name=served.name, state="loaded")
            self._follow_group(served)
        return served

    def _follow_group(self, served: "ServedModel") -> None:
        """A model across machines (engine.distributed): its group's losses and re-formings become events, published
        on the event loop (the group's supervisor runs on a thread of its own)."""
        group = getattr(served.worker, "group", None)
        if group is None:
            return
        loop = asyncio.get_running_loop()

        def on_event(kind: str, fields: dict[str, object]) -> None:
            loop.call_soon_threadsafe(lambda: self.events.publish(kind, name=served.name, **fields))

        group.on_event = on_event

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _retire(self, old: "ServedModel", desired: ResolvedConfig) -> None:
        """Let the replaced model finish its in-flight generations, then free it."""
        timeout = float(desired.config.shutdown_timeout)
        self.model_state(old.name, "draining")
        log.info("model %s draining (%d in flight)", old.name, old.worker.n_in_flight)
        await asyncio.to_thread(old.worker.stop, timeout)
        served = self.serving.model
        if served is not None and served.name == old.name:
            self.model_states.pop(old.name, None)  # the same name is served again by the new worker
            self.events.publish("model", name=old.name, state="unloaded")
        else:
            self.model_state(old.name, "unloaded")
        log.info("model %s unloaded", old.name)

