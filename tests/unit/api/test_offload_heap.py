"""The process heap as the daemon sets it up before loading a model: what is alive then stays out of the cyclic
collector's full passes, and what comes later is collected as ever."""

from __future__ import annotations

import gc
import weakref

from mlxd.api.offload import freeze_startup_objects


class Cycle:
    """An object that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_startup_objects_are_frozen_and_later_cycles_are_still_freed() -> None:
    startup = Cycle()
    startup_ref = weakref.ref(startup)
    try:
        frozen = freeze_startup_objects()
        assert frozen == gc.get_freeze_count() > 1000  # pytest, pydantic, mlx and mlxd's own modules at least
        later = Cycle()
        later_ref = weakref.ref(later)
        del startup, later
        gc.collect()
        assert later_ref() is None  # made after the freeze: a full collection frees it
        assert startup_ref() is not None  # frozen: no collection visits it any more
    finally:
        gc.unfreeze()
        gc.collect()
    assert startup_ref() is None
