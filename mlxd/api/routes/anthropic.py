"""``POST /v1/messages`` (Anthropic Messages, streamed and not) and ``/v1/messages/count_tokens``."""

from __future__ import annotations

from collections.abc import AsyncIterator

from sanic import Blueprint, HTTPResponse, Request

from mlxd.api import chat, controls, media_parts, sse, stream_sessions
from mlxd.api import generation as gen
from mlxd.api.body import json_object, parse
from mlxd.api.context import served_model, serving
from mlxd.api.errors import json_response
from mlxd.api.render import anthropic as ant
from mlxd.api.render.openai import random_id
from mlxd.engine import FinalEvent, TokenEvent
from mlxd.schemas.anthropic import MessagesRequest, to_chat

bp = Blueprint("anthropic")


@bp.post("/v1/messages")
async def messages(request: Request) -> HTTPResponse | None:
    """An Anthropic message; streamed as message_start, content blocks (with a ping), message_delta, message_stop."""
    state = serving(request)
    body = to_chat(parse(MessagesRequest, json_object(request)))
    model = served_model(request)
    prompt, tokens = await chat.render_off_loop(request, body, state, model, body["messages"])
    fields = chat.native_fields(body)
    p = await chat.plan(fields, state, model, prompt, tokens)
    msg_id = random_id()
    jobs = gen.submit(p, model, metrics=state.metrics, route=request.path)
    controls.running(request).register(msg_id, model.worker, jobs)

    if not p.opts.stream:
        await gen.run(jobs)
        job = jobs[0]
        assert job.final is not None
        return json_response(ant.message(chat.parse_whole(prompt, job.final.text), job.final, msg_id=msg_id,
                                         model=model.name))

    parser = chat.ChatParser(prompt)
    events = ant.AnthropicStream(msg_id, model.name)
    stream = await gen.started(jobs)

    async def frames() -> AsyncIterator[str]:
        yield "".join(sse.event(name, data) for name, data in events.start(len(tokens)))
        async for _, ev in stream:
            if isinstance(ev, FinalEvent):
                out = [e for d in parser.finish() for e in events.diff(d)]
                out += events.finish(ev, parser.has_tool_calls)
            else:
                assert isinstance(ev, TokenEvent)  # the route submits without progress: no ProgressEvent
                out = [e for d in parser.feed(ev.text) for e in events.diff(d)]
            if out:
                yield "".join(sse.event(name, data) for name, data in out)

    await stream_sessions.respond(request, frames(), cancel=lambda: gen.cancel(jobs),
                                  on_error=sse.anthropic_error_frame, ping=sse.ping_interval(p.opts))
    return None  # streamed: the response went out through request.respond


@bp.post("/v1/messages/count_tokens")
async def count_tokens(request: Request) -> HTTPResponse | None:
    """``{"input_tokens": N}``: the prompt the request renders to, counted without generating."""
    state = serving(request)
    body = to_chat(parse(MessagesRequest, json_object(request)))
    model = served_model(request)
    _, tokens = await chat.render_off_loop(request, body, state, model, body["messages"])
    return json_response({"input_tokens": await media_parts.token_count(tokens, model, state)})
