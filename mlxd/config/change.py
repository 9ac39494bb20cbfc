"""What one change of the serving state did: the answer every trigger (file, SIGHUP, admin, API) gets back.

It lives in config, the room every other one may import, so that the api and admin layers read the owner's answer
as a typed value rather than through ``Any``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ChangeResult:
    """What a change did (or would do, for a dry run); ``error`` is set when it was refused."""

    applied: bool
    generation: int
    config_hash: str
    changed: tuple[str, ...] = ()
    pending_restart: tuple[str, ...] = ()
    dry_run: bool = False
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class LastError:
    """The last refused change: which trigger, why, when."""

    trigger: str
    message: str
    time: float = field(default_factory=time.time)
