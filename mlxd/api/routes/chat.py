"""``POST /chat/completions``, ``/v1/chat/completions`` and their ``/input_tokens`` counterparts."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

from sanic import Blueprint, HTTPResponse, Request

from mlxd.api import chat, controls, media_parts, offload, planning, sse, stream_sessions
from mlxd.api import generation as gen
from mlxd.api.body import json_object
from mlxd.api.context import served_model, serving
from mlxd.api.errors import json_response
from mlxd.api.render import openai as oai
from mlxd.api.render.message import MessageDiff, finish_reason
from mlxd.api.render.native import native_final, progress_json
from mlxd.api.prompts import detokenize
from mlxd.api.routes.completion import fingerprint
from mlxd.engine import FinalEvent, ProgressEvent
from mlxd.errors import InvalidRequest

bp = Blueprint("chat")

CHAT_FORMAT = "Content-only"


def messages_of(body: dict[str, Any]) -> Any:
    if body.get("messages") is None:
        raise InvalidRequest("'messages' is required")
    return body["messages"]


def _usage(jobs: list[gen.Job]) -> dict[str, Any]:
    finals = [j.final for j in jobs if j.final is not None]
    return oai.usage(sum(f.n_prompt_tokens for f in finals), sum(len(f.tokens) for f in finals),
                     sum(f.timings.cache_n for f in finals))


@bp.post("/chat/completions")
@bp.post("/v1/chat/completions", name="v1_chat_completions")
async def chat_completions(request: Request) -> HTTPResponse | None:
    """OpenAI chat completion: the template renders the messages, the answer is split into content, reasoning_content
    and tool_calls; streamed as chunks ending with ``[DONE]`` (a usage chunk first when asked)."""
    state = serving(request)
    body = json_object(request)
    model = served_model(request)
    prompt, tokens = await chat.render_off_loop(request, body, state, model, messages_of(body))
    fields = chat.native_fields(body)
    # echo: the continued assistant message is repeated at the head of the answer.
    echo = chat.echoed_prefill(fields.pop("echo", None), body["messages"], prompt)
    p = await chat.plan(fields, state, model, prompt, tokens)
    env = oai.Envelope(model.name, fingerprint(request))
    jobs = gen.submit(p, model, metrics=state.metrics, route=request.path, progress=True)
    controls.running(request).register(env.id, model.worker, jobs)

    if not p.opts.stream:
        await gen.run(jobs)
        choices = []
        for job in jobs:
            assert job.final is not None
            msg = chat.parse_whole(prompt, job.final.text)
            msg.content = echo + msg.content
            logprobs = oai.logprobs_content(job.events, p.post_sampling) if p.n_probs > 0 else None
            choices.append(oai.chat_choice(msg, job.final, job.index, logprobs))
        verbose = None
        if p.opts.verbose and jobs[0].final is not None:
            settings = planning.generation_settings(p, chat_format=CHAT_FORMAT,
                                                    reasoning_format=prompt.reasoning_format)
            verbose = native_final(jobs[0].final, index=0, events=jobs[0].events, model=model.name,
                                   prompt_text=await offload.run(detokenize, model.loaded.tokenizer, tokens,
                                                                 size=4 * len(tokens)), settings=settings,
                                   opts=p.opts, n_probs=p.n_probs, post_sampling=p.post_sampling)
        return json_response(oai.chat_completion(env, choices, _usage(jobs), jobs[-1].final.timings
                                                 if jobs[-1].final else None, verbose))

    parsers = {job.index: chat.ChatParser(prompt) for job in jobs}
    stream = await gen.started(jobs)
    plain = p.text_only_chunks  # a text delta's JSON from a template per choice and field
    templates: dict[tuple[int, str], Callable[[str], str]] = {}

    def delta_frame(index: int, d: MessageDiff) -> str:
        """One delta's frame, rendered from its field's template where the delta is text."""
        if d.tool_index is not None:
            return sse.data(oai.chat_chunk(env, index, oai.delta_json(d)))
        field, text = ("reasoning_content", d.reasoning) if d.reasoning else ("content", d.content)
        render = templates.get((index, field))
        if render is None:
            render = templates[index, field] = oai.chat_delta_template(env, index, field)
        return sse.data(render(text))

    async def frames() -> AsyncIterator[str]:
        finished = 0
        reported: set[int] = set()
        async for job, ev in stream:
            parser = parsers[job.index]
            if isinstance(ev, ProgressEvent):
                events = [ev]
                if job.index not in reported and ev.processed > ev.cache:
                    # b10621's first report comes before the first batch: only the cached tokens are in the slot.
                    events.insert(0, dataclasses.replace(ev, processed=ev.cache, time_ms=0))
                reported.add(job.index)
                chunks = []
                for each in events:
                    chunk = oai.chat_chunk(env, job.index, {"role": "assistant", "content": None})
                    chunk["prompt_progress"] = progress_json(each)
                    chunks.append(chunk)
                yield sse.data(chunks)
                continue
            if isinstance(ev, FinalEvent):
                finished += 1
                out = [oai.chat_chunk(env, job.index, oai.delta_json(d)) for d in parser.finish()]
                out.append(oai.chat_chunk(env, job.index, {},
                                          finish_reason(ev.stop_type, parser.has_tool_calls)))
                if finished == len(jobs):
                    if p.opts.include_usage:
                        out.append(oai.chat_usage_chunk(env, _usage(jobs)))
                    out[-1]["timings"] = oai.timings_out(ev.timings).model_dump()
                yield sse.data(out)
                continue
            out = []
            if len(job.events) == 1:
                out.append(oai.chat_chunk(env, job.index, {"role": "assistant", "content": None}))
                if echo:
                    out.append(oai.chat_chunk(env, job.index, {"content": echo}))
            diffs = parser.feed(ev.text)
            if plain:
                rendered = sse.data(out) + "".join(delta_frame(job.index, d) for d in diffs)
                if rendered:
                    yield rendered
                continue
            out += [oai.chat_chunk(env, job.index, oai.delta_json(d)) for d in diffs]
            if p.n_probs > 0 and len(out) > (1 if len(job.events) == 1 else 0):
                logprobs = oai.logprobs_content([ev], p.post_sampling)
                if logprobs is not None:
                    out[-1]["choices"][0]["logprobs"] = logprobs
            if out and p.opts.timings_per_token:
                out[-1]["timings"] = oai.timings_out(job.running_timings()).model_dump()
            if out:
                yield sse.data(out)
        yield sse.DONE

    await stream_sessions.respond(request, frames(), cancel=lambda: gen.cancel(jobs), ping=sse.ping_interval(p.opts))
    return None  # streamed: the response went out through request.respond


@bp.post("/chat/completions/input_tokens")
@bp.post("/v1/chat/completions/input_tokens", name="v1_chat_input_tokens")
async def chat_input_tokens(request: Request) -> HTTPResponse | None:
    """How many prompt tokens a chat request renders to, without generating."""
    state = serving(request)
    body = json_object(request)
    model = served_model(request)
    _, tokens = await chat.render_off_loop(request, body, state, model, messages_of(body))
    return json_response({"input_tokens": await media_parts.token_count(tokens, model, state)})
