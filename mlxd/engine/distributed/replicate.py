"""Every rank runs mlxd's own scheduler; rank 0 decides each step's inputs and the others apply the same ones.

This is a replicated state machine: the scheduler is deterministic given its inputs (the requests with their
resolved seeds, cancellations, ends of reasoning) and the model's outputs, which the split makes identical on every
rank (split.py). Rank 0's scheduler records the commands the worker applies and sends them to the other ranks at
the top of each step (channel.py); a follower applies them to its own scheduler and runs the same step, so every
collective of the forward pass meets its counterpart, and throws away the events its requests produce.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from mlxd.engine.batching.handle import RequestHandle
from mlxd.engine.batching.scheduler import Scheduler
from mlxd.engine.distributed import wire
from mlxd.engine.distributed.channel import GroupBroken, StepChannel
from mlxd.engine.types import ErrorEvent, Event, FinalEvent, GenerationRequest

log = logging.getLogger("mlxd.engine.distributed")

Op = tuple[Any, ...]  # ("add", id_task, request) | ("cancel", id_task, message) | ("reasoning_end", id_task) | ...


def portable(request: GenerationRequest) -> GenerationRequest:
    """The request as another process can rebuild it: a compiled constraint goes as its spec (each rank compiles
    it again, which is deterministic)."""
    from dataclasses import replace

    from mlxd.engine.constrain import CompiledConstraint

    if isinstance(request.constraint, CompiledConstraint):
        return replace(request, constraint=request.constraint.spec)
    return request


class LeaderScheduler(Scheduler):
    """Rank 0's scheduler: applies commands as usual and ships them to the other ranks before each step."""

    channel: StepChannel | None = None
    on_broken: Callable[[str], None] = staticmethod(lambda reason: None)

    def _record(self, op: Op) -> None:
        pending: list[Op] = self.__dict__.setdefault("_ops", [])
        pending.append(op)

    def add(self, handle: RequestHandle) -> None:
        self._record(("add", handle.id_task, portable(handle.request)))
        super().add(handle)

    def cancel(self, handle: RequestHandle, message: str = "request cancelled") -> None:
        self._record(("cancel", handle.id_task, message))
        super().cancel(handle, message)

    def end_reasoning(self, handle: RequestHandle) -> None:
        self._record(("reasoning_end", handle.id_task))
        super().end_reasoning(handle)

    def cancel_all(self, message: str) -> None:
        self._record(("cancel_all", message))
        super().cancel_all(message)

    def _flush(self, *extra: Op) -> None:
        ops: list[Op] = self.__dict__.pop("_ops", [])
        ops.extend(extra)
        if self.channel is None:
            return
        try:
            self.channel.send(wire.dumps(ops) if ops else b"")
        except GroupBroken as exc:
            self.on_broken(str(exc))
            raise

    def step(self) -> None:
        self._flush()
        super().step()

    def close(self) -> None:
        try:
            self._flush(("stop",))
        except GroupBroken:
            pass
        super().close()


class _Discard(RequestHandle):
    """A follower's handle: the events are rank 0's to deliver; this one only forgets the request when it ends."""

    def __init__(self, request: GenerationRequest, id_task: int, forget: Callable[[int], None]) -> None:
        super().__init__(request, id_task, lambda handle: None)
        self._forget = forget

    def push(self, event: Event) -> None:
        if isinstance(event, (FinalEvent, ErrorEvent)):
            self._forget(self.id_task)


def follow(scheduler: Scheduler, channel: StepChannel) -> None:
    """A follower's loop: rank 0's commands, then the same step, until rank 0 says stop (GroupBroken if a rank
    goes)."""
    handles: dict[int, _Discard] = {}

    def forget(id_task: int) -> None:
        handles.pop(id_task, None)

    while True:
        payload = channel.receive()
        ops: list[Op] = wire.loads(payload) if payload else []
        for op in ops:
            kind = op[0]
            if kind == "add":
                handle = handles[op[1]] = _Discard(op[2], op[1], forget)
                scheduler.add(handle)
            elif kind == "cancel" and op[1] in handles:
                scheduler.cancel(handles[op[1]], op[2])
            elif kind == "reasoning_end" and op[1] in handles:
                scheduler.end_reasoning(handles[op[1]])
            elif kind == "cancel_all":
                scheduler.cancel_all(op[1])
            elif kind == "stop":
                scheduler.close()
                return
        scheduler.step()
