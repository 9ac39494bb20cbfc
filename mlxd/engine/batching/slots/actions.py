"""Slot actions (``POST /slots/N?action=erase|save|restore``): queued to the model worker's thread and run there
between steps, once the slot is idle, so that no action ever sees a slot mid-request.

A mixin of ``ModelWorker``, which owns the condition variable, the scheduler and the action queue.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from mlxd.engine.batching.slots import state_file as slot_state
from mlxd.engine.batching.slots.identity import SlotOwner, owner_of
from mlxd.engine.batching.slots.table import Slot
from mlxd.errors import InvalidRequest, Unavailable

if TYPE_CHECKING:
    from mlxd.engine.loading.loader import LoadedModel

RESTORE_FAILED = "Unable to restore slot, no available space in KV cache or invalid slot save file"


class SlotActions:
    """Erase, save and restore a slot's resident cache on the worker thread."""

    # Provided by the ModelWorker this is mixed into.
    scheduler: Any
    _cv: threading.Condition
    _accepting: bool
    _actions: list[tuple[int, Callable[[Slot], int], Future[int]]]
    loaded: "LoadedModel"
    n_ctx_slot: int
    _slot_owner: SlotOwner | None = None

    def erase_slot(self, id_slot: int) -> int:
        """Forget a slot's resident tokens; returns how many there were."""

        def erase(slot: Slot) -> int:
            n = len(slot.resident.tokens) if slot.resident else 0
            slot.resident = None
            return n

        return self._slot_action(id_slot, erase)

    def slot_owner(self) -> SlotOwner:
        """What this worker's slot files say wrote them (computed once, on the worker thread)."""
        if self._slot_owner is None:
            self._slot_owner = owner_of(self.loaded, self.n_ctx_slot)
        return self._slot_owner

    def save_slot(self, id_slot: int, path: Path) -> int:
        """Write a slot's resident cache to ``path``; returns the number of tokens saved."""
        return self._slot_action(id_slot, lambda slot: slot_state.save(slot.resident, Path(path), self.slot_owner()))

    def restore_slot(self, id_slot: int, path: Path) -> int:
        """Load a slot's resident cache from ``path``; returns the number of tokens restored."""

        def restore(slot: Slot) -> int:
            try:
                slot.resident = slot_state.load(Path(path), self.scheduler.new_cache(), self.slot_owner())
            except slot_state.SlotFileError as exc:
                raise InvalidRequest(RESTORE_FAILED) from exc
            return len(slot.resident.tokens) if slot.resident else 0

        return self._slot_action(id_slot, restore)

    def _slot_action(self, id_slot: int, action: Callable[[Slot], int]) -> int:
        if not 0 <= id_slot < len(self.scheduler.slots):
            raise InvalidRequest("Invalid slot ID")
        done: Future[int] = Future()
        with self._cv:
            if not self._accepting:
                raise Unavailable("the model is not accepting requests (it is stopping or not started)")
            self._actions.append((id_slot, action, done))
            self._cv.notify_all()
        return done.result()

    def _run_slot_actions(self) -> None:
        with self._cv:
            ready = [a for a in self._actions if not self.scheduler.slots.slots[a[0]].is_processing]
            for a in ready:
                self._actions.remove(a)
        for id_slot, action, done in ready:
            try:
                done.set_result(action(self.scheduler.slots.slots[id_slot]))
            except Exception as exc:
                done.set_exception(exc)
