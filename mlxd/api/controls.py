"""Running chat completions by id, for ``POST /v1/chat/completions/control`` (``reasoning_end``).

A chat route registers its generations under the completion id it answers with (``chatcmpl-...``); the control
route finds them there and asks their worker, through its inbox, to force the end of their reasoning. Answers are
b10621's: ``{"success": true}``, or ``{"success": false, "message": ...}`` when no generation with that id is
running or it was not started with ``reasoning_control``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sanic import Request

NO_COMPLETION = "no active completion for this id"
NOT_ENABLED = "reasoning control not enabled for this completion"


@dataclass
class _Running:
    worker: Any  # the engine.batching.worker.ModelWorker serving the jobs
    jobs: Sequence[Any]  # mlxd.api.generation.Job

    @property
    def active(self) -> list[Any]:
        return [job for job in self.jobs if job.final is None and not job.handle.cancelled]


class RunningCompletions:
    """Completion id -> its running generations; finished ones are forgotten on the next registration."""

    def __init__(self) -> None:
        self._by_id: dict[str, _Running] = {}

    def register(self, completion_id: str, worker: Any, jobs: Sequence[Any]) -> None:
        self._by_id = {k: v for k, v in self._by_id.items() if v.active}
        self._by_id[completion_id] = _Running(worker, jobs)

    def end_reasoning(self, completion_id: str) -> dict[str, Any]:
        """Force the end of reasoning of the completion's generations; b10621's answer object."""
        running = self._by_id.get(completion_id)
        jobs = running.active if running is not None else []
        if running is None or not jobs:
            return {"success": False, "message": NO_COMPLETION}
        controllable = [job for job in jobs if job.handle.request.reasoning is not None
                        and job.handle.request.reasoning.controllable]
        if not controllable:
            return {"success": False, "message": NOT_ENABLED}
        for job in controllable:
            running.worker.end_reasoning(job.handle)
        return {"success": True}


def running(request: Request) -> RunningCompletions:
    """The app's registry of running completions."""
    ctx = request.app.ctx
    registry = getattr(ctx, "running_completions", None)
    if registry is None:
        registry = ctx.running_completions = RunningCompletions()
    return registry
