"""Running what was planned: one engine request per prompt (and per ``n_cmpl``), their events interleaved as they
arrive, and cancellation whenever the reader stops early (a client gone, an error).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlxd.api import request_log
from mlxd.api.planning import Plan, engine_request
from mlxd.engine import ServedModel
from mlxd.engine import ErrorEvent, FinalEvent, ProgressEvent, Timings, TokenEvent
from mlxd.errors import InvalidRequest, RequestError


@dataclass
class Job:
    """One generation of a request (a prompt, or one of ``n_cmpl`` copies) and what it produced so far."""

    index: int
    prompt_tokens: list[int]
    handle: Any
    events: list[TokenEvent] = field(default_factory=list)
    final: FinalEvent | None = None
    metrics: Any = None
    submitted: float = field(default_factory=time.perf_counter)
    first_token: float | None = None

    def running_timings(self) -> Timings:
        """``timings_per_token``: timings so far, measured where the events arrive (the worker reports exact
        timings, cache hits included, only with the final event)."""
        now = time.perf_counter()
        first = self.first_token or now
        return Timings(cache_n=0, prompt_n=len(self.prompt_tokens), prompt_ms=(first - self.submitted) * 1e3,
                       predicted_n=len(self.events), predicted_ms=(now - first) * 1e3)


def submit(p: Plan, model: ServedModel, *, metrics: Any = None, route: str = "", progress: bool = False) -> list[Job]:
    """Queue one generation per prompt and per ``n_cmpl``; if one is refused, those already queued are cancelled.

    ``metrics`` (the app's ``ServerMetrics``) counts the request under ``route`` and each generation at its end.
    ``progress``: the route renders ``ProgressEvent`` (``return_progress``), so the worker sends them.
    """
    if metrics is not None:
        metrics.on_request(route)
        metrics.follow(model.worker)
    refuse_what_never_fits(len(p.prompts) * p.opts.n_cmpl, model)
    jobs: list[Job] = []
    try:
        for tokens in p.prompts:
            for _ in range(p.opts.n_cmpl):
                handle = model.worker.submit(engine_request(p, tokens, progress=progress))
                jobs.append(Job(index=len(jobs), prompt_tokens=tokens, handle=handle, metrics=metrics))
    except BaseException:
        cancel(jobs)
        raise
    return jobs


def refuse_what_never_fits(n_generations: int, model: ServedModel) -> None:
    """A request with more generations than the worker ever holds at once (slots plus its wait queue) would get
    "busy, retry later" even on an idle server, and a client would retry it forever: it is a bad request."""
    settings = getattr(model.worker, "settings", None)
    if settings is None:
        return
    capacity = int(settings.n_parallel) + int(settings.queue_max)
    if n_generations > capacity:
        raise InvalidRequest(f"the request asks for {n_generations} generations (prompts times n_cmpl), more than the "
                             f"server ever holds at once ({settings.n_parallel} slots and {settings.queue_max} "
                             "waiting); send fewer prompts per request")


def cancel(jobs: Sequence[Job]) -> None:
    for job in jobs:
        if job.final is None:
            job.handle.cancel()


def _failed(ev: ErrorEvent) -> RequestError:
    err = RequestError(ev.message)
    err.status = ev.code
    err.type = ev.type
    return err



async def events(jobs: Sequence[Job]) -> AsyncGenerator[tuple[Job, TokenEvent | FinalEvent | ProgressEvent], None]:
    """Every job's events, interleaved as they arrive; an ``ErrorEvent`` raises its envelope error.

    Leaving the iteration early (a client gone, an error) cancels the jobs that have not finished.
    """
    if len(jobs) == 1:  # one generation needs no interleaving: its events are read straight from its handle
        try:
            async for ev in jobs[0].handle:
                _note(jobs[0], ev)
                yield jobs[0], ev
        finally:
            cancel(jobs)
        return
    queue: asyncio.Queue[tuple[Job, Any]] = asyncio.Queue()

    async def pump(job: Job) -> None:
        try:
            async for ev in job.handle:
                await queue.put((job, ev))
        except BaseException as exc:  # noqa: BLE001 - handed to the reader, which re-raises it
            await queue.put((job, exc))

    tasks = [asyncio.create_task(pump(job)) for job in jobs]
    remaining = len(jobs)
    try:
        while remaining:
            job, ev = await queue.get()
            if isinstance(ev, BaseException):
                raise ev
            _note(job, ev)
            if isinstance(ev, FinalEvent):
                remaining -= 1
            yield job, ev
    finally:
        cancel(jobs)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task


def _note(job: Job, ev: Any) -> None:
    """Record one event on its job; an ``ErrorEvent`` raises its envelope error."""
    if isinstance(ev, ErrorEvent):
        raise _failed(ev)
    if isinstance(ev, FinalEvent):
        job.final = ev
        request_log.on_final(ev)
        if job.metrics is not None:
            job.metrics.on_final(ev)
    elif isinstance(ev, ProgressEvent):
        pass  # prompt processing: neither a token nor the end
    else:
        if job.first_token is None:
            job.first_token = time.perf_counter()
        job.events.append(ev)
        request_log.on_token(ev)


async def run(jobs: Sequence[Job]) -> list[Job]:
    """Read every job to its end (non-streamed responses)."""
    async for _ in events(jobs):
        pass
    return list(jobs)


async def started(jobs: Sequence[Job]) -> AsyncGenerator[tuple[Job, TokenEvent | FinalEvent | ProgressEvent], None]:
    """``events(jobs)`` once the first event is in: a refusal the worker reports up front (a prompt that does not
    fit) is then raised before a stream's 200 status line goes out, as b10621 does."""
    stream = events(jobs)
    try:
        first = await anext(stream)
    except StopAsyncIteration:
        first = None
    except BaseException:
        await stream.aclose()
        raise

    async def chained() -> AsyncGenerator[tuple[Job, TokenEvent | FinalEvent | ProgressEvent], None]:
        try:
            if first is not None:
                yield first
            async for item in stream:
                yield item
        finally:
            await stream.aclose()

    return chained()
