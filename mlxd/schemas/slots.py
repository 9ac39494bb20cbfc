"""``/slots`` actions: the request body and the three result shapes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, StrictStr


class SlotFileRequest(BaseModel):
    """``save`` and ``restore`` name a file inside ``--slot-save-path``."""

    model_config = ConfigDict(extra="allow")

    filename: StrictStr


class SaveTimings(BaseModel):
    save_ms: float


class RestoreTimings(BaseModel):
    restore_ms: float


class SlotSaved(BaseModel):
    id_slot: int
    filename: str
    n_saved: int
    n_written: int
    timings: SaveTimings


class SlotRestored(BaseModel):
    id_slot: int
    filename: str
    n_restored: int
    n_read: int
    timings: RestoreTimings


class SlotErased(BaseModel):
    id_slot: int
    n_erased: int
