"""The process heap as the daemon sets it up before loading a model: what is alive then stays out of the cyclic
collector's full passes, and what comes later is collected as ever."""

from __future__ import annotations

import gc
import sys
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
        # Another thread (pytest-xdist's channel to its controller, a thread an earlier test left) that drops the
        # last reference to a frozen object between the two counts would make them differ: with a switch interval
        # this long, none runs in between.
        switch = sys.getswitchinterval()
        sys.setswitchinterval(60)
        try:
            frozen = freeze_startup_objects()
            count = gc.get_freeze_count()
        finally:
            sys.setswitchinterval(switch)
        assert frozen == count > 1000  # pytest, pydantic, mlx and mlxd's own modules at least
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
