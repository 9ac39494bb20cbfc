"""``POST /completion``, ``/completions`` (native) and ``/v1/completions`` (OpenAI text completions)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from sanic import Blueprint, HTTPResponse, Request

from mlxd.api import constraints, media_parts, offload, planning, sse, stream_sessions
from mlxd.api import generation as gen
from mlxd.api.body import json_object
from mlxd.api.context import served_model, serving
from mlxd.api.errors import json_response
from mlxd.api.prompts import detokenize, tokenize_prompts
from mlxd.api.render import openai as oai
from mlxd.api.render.message import finish_reason
from mlxd.api.render.native import native_final, native_partial, native_progress, partial_template, progress_json
from mlxd.api.routes.props import build_name
from mlxd.engine import FinalEvent, ProgressEvent
from mlxd.errors import InvalidRequest

bp = Blueprint("completion")


def fingerprint(request: Request) -> str:
    """``system_fingerprint``: b10621 puts its build there (``b10621-c1d0e7a0``); mlxd its build name, the same."""
    return build_name(serving(request).build_info)


async def _native_final(job: gen.Job, p: planning.Plan, model: Any, settings: dict[str, Any]) -> dict[str, Any]:
    assert job.final is not None
    # The prompt's text is as long as the prompt: detokenized off the loop when that is long.
    prompt_text = await offload.run(detokenize, model.loaded.tokenizer, job.prompt_tokens,
                                    size=4 * len(job.prompt_tokens))
    return native_final(job.final, index=job.index, events=job.events, model=model.name, prompt_text=prompt_text,
                        settings=settings, opts=p.opts, n_probs=p.n_probs, post_sampling=p.post_sampling)


async def _prepare(request: Request, *, openai: bool) -> tuple[dict[str, Any], Any, planning.Plan]:
    state = serving(request)
    body = json_object(request)
    model = served_model(request)
    prompts = await offload.run(tokenize_prompts, model.loaded.tokenizer, body, model=model,
                                size=len(request.body or b""))
    media_path = planning.config_value(state, "media_path", None)
    prompts = [await media_parts.resolve(tokens, model, media_path) for tokens in prompts]  # multimodal_data
    p = planning.plan(body, state, model, prompts)
    return body, model, await constraints.constrain(p, body, state, model, chat=openai)


@bp.post("/completion")
@bp.post("/completions", name="completions_alias")
async def completion(request: Request) -> HTTPResponse | None:
    """Native completion: one object (or an array for several prompts); a stream ends with the final object."""
    body, model, p = await _prepare(request, openai=False)
    state = serving(request)
    reasoning_format = str(planning.config_value(state, "reasoning_format", "deepseek"))
    settings = planning.generation_settings(p, reasoning_format=reasoning_format)
    jobs = gen.submit(p, model, metrics=state.metrics, route=request.path, progress=True)
    return await respond_native(request, p, model, settings, jobs)


async def respond_native(request: Request, p: planning.Plan, model: Any, settings: dict[str, Any],
                         jobs: list[gen.Job]) -> Any:
    """Answer native jobs (``/completion``, ``/infill``): one object, or an array for several prompts; a stream
    sends partial objects and ends with the final one, with no ``[DONE]``."""
    if not p.opts.stream:
        await gen.run(jobs)
        results = [await _native_final(job, p, model, settings) for job in jobs]
        return json_response(results[0] if len(results) == 1 else results)

    stream = await gen.started(jobs)
    plain = {job.index: partial_template(index=job.index, n_prompt=len(job.prompt_tokens),
                                         return_tokens=p.opts.return_tokens)
             for job in jobs} if p.text_only_chunks else None

    async def frames() -> AsyncIterator[str]:
        async for job, ev in stream:
            if isinstance(ev, FinalEvent):
                yield sse.data(await _native_final(job, p, model, settings))
            elif isinstance(ev, ProgressEvent):
                yield sse.data(native_progress(ev, index=job.index, n_prompt=len(job.prompt_tokens),
                                               timings=p.opts.timings_per_token))
            elif plain is not None:
                yield sse.data(plain[job.index](ev.text, len(job.events), [ev.token_id]))
            else:
                yield sse.data(native_partial(ev, index=job.index, n_decoded=len(job.events),
                                              n_prompt=len(job.prompt_tokens), opts=p.opts, n_probs=p.n_probs,
                                              post_sampling=p.post_sampling, timings=job.running_timings()))

    await stream_sessions.respond(request, frames(), cancel=lambda: gen.cancel(jobs), ping=sse.ping_interval(p.opts))
    return None


def _usage(jobs: list[gen.Job]) -> dict[str, Any]:
    finals = [j.final for j in jobs if j.final is not None]
    return oai.usage(sum(f.n_prompt_tokens for f in finals), sum(len(f.tokens) for f in finals),
                     sum(f.timings.cache_n for f in finals))


def refuse_oai_completion_params(body: dict[str, Any]) -> None:
    """What b10621's OpenAI completion parser rejects, in its words (there a 500; bad input here is a 400)."""
    if body.get("echo") is True:
        raise InvalidRequest("Only no echo is supported")
    for param in ("best_of", "suffix"):
        if param in body:
            raise InvalidRequest(f"Unsupported param: {param}")


@bp.post("/v1/completions")
async def completions_oai(request: Request) -> HTTPResponse | None:
    """OpenAI text completion, streamed (ending with ``[DONE]``) or whole."""
    refuse_oai_completion_params(json_object(request))
    body, model, p = await _prepare(request, openai=True)
    state = serving(request)
    env = oai.Envelope(model.name, fingerprint(request))
    jobs = gen.submit(p, model, metrics=state.metrics, route=request.path, progress=True)
    if not p.opts.stream:
        await gen.run(jobs)
        choices = []
        for job in jobs:
            assert job.final is not None
            logprobs = oai.logprobs_content(job.events, p.post_sampling) if p.n_probs > 0 else None
            choices.append(oai.text_choice(job.final.text, job.index, logprobs,
                                           finish_reason(job.final.stop_type, False)))
        verbose = None
        if p.opts.verbose:
            settings = planning.generation_settings(p)
            verbose = await _native_final(jobs[0], p, model, settings)
        return json_response(oai.text_completion(env, choices, _usage(jobs), jobs[-1].final.timings
                                                 if jobs[-1].final else None, verbose))

    stream = await gen.started(jobs)
    plain = {job.index: oai.text_chunk_template(env, job.index) for job in jobs} if p.text_only_chunks else None

    async def frames() -> AsyncIterator[str]:
        finished = 0
        async for job, ev in stream:
            if isinstance(ev, FinalEvent):
                finished += 1
                if finished == len(jobs):
                    choice = oai.text_choice("", job.index, None, finish_reason(ev.stop_type, False))
                    last = oai.text_completion(env, [choice], _usage(jobs), ev.timings)
                    yield sse.data(last)
                else:
                    choice = oai.text_choice("", job.index, None, finish_reason(ev.stop_type, False))
                    yield sse.data(oai.text_chunk(env, choice))
            elif isinstance(ev, ProgressEvent):
                choice = oai.text_choice("", job.index, None, None)
                yield sse.data(oai.text_chunk(env, choice, progress=progress_json(ev)))
            elif plain is not None:
                yield sse.data(plain[job.index](ev.text))
            else:
                logprobs = None
                if p.n_probs > 0:
                    logprobs = oai.logprobs_content([ev], p.post_sampling)
                choice = oai.text_choice(ev.text, job.index, logprobs, None)
                timings = job.running_timings() if p.opts.timings_per_token else None
                yield sse.data(oai.text_chunk(env, choice, timings))
        yield sse.DONE

    await stream_sessions.respond(request, frames(), cancel=lambda: gen.cancel(jobs), ping=sse.ping_interval(p.opts))
    return None  # streamed: the response went out through request.respond
