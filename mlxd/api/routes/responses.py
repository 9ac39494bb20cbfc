"""``POST /v1/responses`` and ``/responses`` (OpenAI Responses, streamed and not), and their ``/input_tokens``."""

from __future__ import annotations

from collections.abc import AsyncIterator

from sanic import Blueprint, HTTPResponse, Request

from mlxd.api import chat, media_parts, sse, stream_sessions
from mlxd.api import generation as gen
from mlxd.api.body import json_object, parse
from mlxd.api.context import served_model, serving
from mlxd.api.errors import json_response
from mlxd.api.render import openai as oai
from mlxd.api.render import responses as resp
from mlxd.api.render.native import progress_json
from mlxd.api.render.openai import random_id
from mlxd.engine import FinalEvent, ProgressEvent
from mlxd.schemas.responses import ResponsesRequest, to_chat

bp = Blueprint("responses")


@bp.post("/v1/responses")
@bp.post("/responses", name="responses_alias")
async def responses(request: Request) -> HTTPResponse | None:
    """A ``response`` object, or its event stream (response.created ... response.completed)."""
    state = serving(request)
    body = to_chat(parse(ResponsesRequest, json_object(request)))
    model = served_model(request)
    prompt, tokens = await chat.render_off_loop(request, body, state, model, body["messages"])
    fields = chat.native_fields(body)
    p = await chat.plan(fields, state, model, prompt, tokens)
    resp_id = random_id("resp_")
    jobs = gen.submit(p, model, metrics=state.metrics, route=request.path, progress=True)

    if not p.opts.stream:
        await gen.run(jobs)
        job = jobs[0]
        assert job.final is not None
        return json_response(resp.response(chat.parse_whole(prompt, job.final.text), job.final, resp_id=resp_id,
                                           model=model.name))

    parser = chat.ChatParser(prompt)
    events = resp.ResponsesStream(resp_id, model.name)
    stream = await gen.started(jobs)

    async def frames() -> AsyncIterator[str]:
        yield "".join(sse.event(name, data) for name, data in events.start())
        async for job, ev in stream:
            if isinstance(ev, ProgressEvent):
                out = events.progress(progress_json(ev))
            elif isinstance(ev, FinalEvent):
                out = [e for d in parser.finish() for e in events.diff(d)]
                out += events.finish(parser.message, ev)
                out[-1][1]["timings"] = oai.timings_out(ev.timings).model_dump()  # b10621: always on the last one
            else:
                out = [e for d in parser.feed(ev.text) for e in events.diff(d)]
                if out and p.opts.timings_per_token:  # on the last event of each token, as b10621 puts it
                    out[-1][1]["timings"] = oai.timings_out(job.running_timings()).model_dump()
            if out:
                yield "".join(sse.event(name, data) for name, data in out)

    await stream_sessions.respond(request, frames(), cancel=lambda: gen.cancel(jobs), ping=sse.ping_interval(p.opts))
    return None  # streamed: the response went out through request.respond


@bp.post("/v1/responses/input_tokens")
@bp.post("/responses/input_tokens", name="responses_input_tokens_alias")
async def responses_input_tokens(request: Request) -> HTTPResponse | None:
    """``{"object": "response.input_tokens", "input_tokens": N}`` without generating."""
    state = serving(request)
    body = to_chat(parse(ResponsesRequest, json_object(request)))
    model = served_model(request)
    _, tokens = await chat.render_off_loop(request, body, state, model, body["messages"])
    return json_response({"object": "response.input_tokens",
                          "input_tokens": await media_parts.token_count(tokens, model, state)})
