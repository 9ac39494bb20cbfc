"""The caller's end of one request: events from the worker thread, read by asyncio or by a plain iterator."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from typing import AsyncIterator, Callable, Iterator

from mlxd.engine.types import ErrorEvent, Event, FinalEvent, GenerationRequest

# Wake-ups held back on this thread (see ``deferred_wakeups``): loop -> the events to set there.
_held = threading.local()


@contextlib.contextmanager
def deferred_wakeups() -> Iterator[None]:
    """Wake the readers of the events pushed inside the block once per event loop, when the block ends.

    A decode step pushes one token to every row; waking each reader on its own costs a cross-thread call (and an
    event-loop wake-up) per token, where one per step does.
    """
    outer = getattr(_held, "wakes", None)
    if outer is not None:  # already deferred by an enclosing block
        yield
        return
    _held.wakes = {}
    try:
        yield
    finally:
        wakes, _held.wakes = _held.wakes, None
        for loop, events in wakes.items():
            try:
                loop.call_soon_threadsafe(_set_all, events)
            except RuntimeError:  # the loop is gone; nobody is listening any more
                pass


def _set_all(events: list[asyncio.Event]) -> None:
    for event in events:
        event.set()


class RequestHandle:
    """Events of one generation: ``TokenEvent``... then one ``FinalEvent`` or ``ErrorEvent``.

    The worker thread pushes; the reader iterates with ``async for`` on an event loop (woken with
    ``call_soon_threadsafe``) or with a plain ``for`` in the same process. ``cancel()`` asks the worker to drop
    the request; it frees the slot at the worker's next step.
    """

    def __init__(self, request: GenerationRequest, id_task: int, on_cancel: Callable[["RequestHandle"], None]) -> None:
        self.request = request
        self.id_task = id_task
        self._events: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._on_cancel = on_cancel
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._armed = False  # the async reader is about to sleep and needs a wake-up
        self._done = False  # the reader has seen the terminal event
        self.cancelled = False

    # -- worker side ---------------------------------------------------------------------------------------
    def push(self, event: Event) -> None:
        """Deliver one event (called on the worker thread)."""
        self._events.put(event)
        with self._lock:
            # Wake the reader only when it sleeps: a reader that is behind drains the queue without a wake-up.
            loop, wake, armed = self._loop, self._wake, self._armed
            self._armed = False
        if armed and loop is not None and wake is not None:
            held = getattr(_held, "wakes", None)
            if held is not None:
                held.setdefault(loop, []).append(wake)
                return
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:  # the reader's loop is gone; nobody is listening any more
                pass

    # -- reader side ---------------------------------------------------------------------------------------
    def cancel(self) -> None:
        """Stop the generation and free its slot and cache; safe to call from any thread, more than once."""
        if self.cancelled:
            return
        self.cancelled = True
        self._on_cancel(self)

    def __iter__(self) -> Iterator[Event]:
        while not self._done:
            event = self._events.get()
            yield self._mark(event)

    def __aiter__(self) -> AsyncIterator[Event]:
        with self._lock:
            self._loop = asyncio.get_running_loop()
            self._wake = asyncio.Event()
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[Event]:
        assert self._wake is not None
        wake = self._wake
        while not self._done:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                wake.clear()
                with self._lock:
                    self._armed = True
                # An event may have arrived between the miss and the arming; look once more before sleeping.
                try:
                    event = self._events.get_nowait()
                except queue.Empty:
                    await wake.wait()
                    continue
            yield self._mark(event)

    def result(self) -> FinalEvent | ErrorEvent:
        """Read to the end and return the terminal event (for in-process callers and tests)."""
        last: Event | None = None
        for last in self:
            pass
        assert isinstance(last, (FinalEvent, ErrorEvent))
        return last

    def _mark(self, event: Event) -> Event:
        if isinstance(event, (FinalEvent, ErrorEvent)):
            self._done = True
        return event


class TrackedHandle(RequestHandle):
    """A handle that tells the worker when its request has ended (for the queue bound and draining)."""

    def __init__(self, request: GenerationRequest, id_task: int, on_cancel: Callable[[RequestHandle], None],
                 on_terminal: Callable[[], None]) -> None:
        super().__init__(request, id_task, on_cancel)
        self._on_terminal = on_terminal
        self._ended = False

    def push(self, event: Event) -> None:
        super().push(event)
        if isinstance(event, (FinalEvent, ErrorEvent)) and not self._ended:
            self._ended = True
            self._on_terminal()
