"""``GET /slots`` and ``POST /slots/:id_slot?action=save|restore|erase``.

The worker owns the slots' caches; save and restore call its ``save_slot(id_slot, path)``,
``restore_slot(id_slot, path)`` and ``erase_slot(id_slot)``, each returning the token count it handled. A worker
without them answers 501, as b10621 answers when slot files are off.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from sanic import Blueprint, HTTPResponse, Request

from mlxd.api.body import json_object, parse
from mlxd.api.context import served_model, serving
from mlxd.api.errors import json_response
from mlxd.api.model_facts import n_slots, slot_entries
from mlxd.api.slot_files import slot_file, write_atomically
from mlxd.errors import InvalidRequest, NotSupported, Unavailable
from mlxd.schemas.slots import RestoreTimings, SaveTimings, SlotErased, SlotFileRequest, SlotRestored, SlotSaved

bp = Blueprint("slots")

SLOTS_DISABLED = "This server does not support slots endpoint. Start it with `--slots`"
ACTIONS_DISABLED = "This server does not support slots action. Start it with `--slot-save-path`"
SAVE_ONTO_DIRECTORY = "Invalid filename: a directory of that name exists in the slot save path"
RESTORE_FAILED = "Unable to restore slot, no available space in KV cache or invalid slot save file"
ACTIONS_UNAVAILABLE = "This server does not support slots action: the model worker cannot save or restore slots"


@bp.get("/slots")
async def get_slots(request: Request) -> HTTPResponse:
    state = serving(request)
    if not state.config.slots:
        raise NotSupported(SLOTS_DISABLED)
    entries = slot_entries(served_model(request))
    if request.args.get("fail_on_no_slot") and not any(not e.get("is_processing") for e in entries):
        raise Unavailable("no slot available")
    return json_response(entries)


@bp.post("/slots/<id_slot:str>")
async def post_slot(request: Request, id_slot: str) -> HTTPResponse:
    state = serving(request)
    directory = state.config.slot_save_path
    if not directory:
        raise NotSupported(ACTIONS_DISABLED)
    try:
        slot_id = int(id_slot)
    except ValueError:
        raise InvalidRequest("Invalid slot ID") from None
    model = served_model(request)
    if not 0 <= slot_id < n_slots(model):
        raise InvalidRequest("Invalid slot ID")
    action = request.args.get("action", "")
    worker = model.worker
    if action not in ("save", "restore", "erase"):
        raise InvalidRequest("Invalid action")
    hook: Callable[..., int] | None = getattr(worker, f"{action}_slot", None)
    started = time.perf_counter()
    if action == "erase":
        if hook is None:
            raise NotSupported(ACTIONS_UNAVAILABLE)
        n = await asyncio.to_thread(hook, slot_id)
        return json_response(SlotErased(id_slot=slot_id, n_erased=int(n)).model_dump())

    filename = parse(SlotFileRequest, json_object(request)).filename
    path = slot_file(directory, filename)
    if hook is None:
        raise NotSupported(ACTIONS_UNAVAILABLE)
    if action == "save":
        save = hook
        if path.is_dir():  # the rename over it would fail: the request's name is the problem, not the server
            raise InvalidRequest(SAVE_ONTO_DIRECTORY)
        try:
            n = await asyncio.to_thread(write_atomically, path, lambda tmp: save(slot_id, tmp))
        except IsADirectoryError as exc:  # made a directory since the check
            raise InvalidRequest(SAVE_ONTO_DIRECTORY) from exc
        ms = (time.perf_counter() - started) * 1e3
        saved = SlotSaved(id_slot=slot_id, filename=filename, n_saved=int(n), n_written=path.stat().st_size,
                          timings=SaveTimings(save_ms=ms))
        return json_response(saved.model_dump())
    if not path.is_file():
        raise InvalidRequest(RESTORE_FAILED)
    n = await asyncio.to_thread(hook, slot_id, path)
    ms = (time.perf_counter() - started) * 1e3
    restored = SlotRestored(id_slot=slot_id, filename=filename, n_restored=int(n), n_read=path.stat().st_size,
                            timings=RestoreTimings(restore_ms=ms))
    return json_response(restored.model_dump())
