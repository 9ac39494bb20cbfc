"""``POST /v1/audio/transcriptions`` and ``/audio/transcriptions``: b10621's translation of a transcription
upload into a chat completion through the loaded model (not a speech-to-text model of its own).

As b10621: a model without audio input answers 501 before any field is read; the form's ``file`` part is the
clip (the last one wins); ``prompt`` (default "Transcribe audio to text") gets `` (language: xx)`` for a non-empty
``language``, then the media marker; ``response_format`` must be ``json``; ``temperature`` and ``max_tokens`` are
numbers written as text; ``stream`` is on only for the literal ``true``. A text field given twice falls back to its
default (b10621 reads it as an array, which is not a string); fields it does not know are ignored.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

from sanic import Blueprint, HTTPResponse, Request

from mlxd.api import chat, media, media_parts, sse, stream_sessions
from mlxd.api import generation as gen
from mlxd.api.context import served_model, serving
from mlxd.api.errors import json_response
from mlxd.api.media import MARKER, Source
from mlxd.engine import FinalEvent, ProgressEvent
from mlxd.errors import InvalidRequest, NotSupported

bp = Blueprint("audio")

NO_AUDIO = "The current model does not support audio input."
NO_FILE = "No input file found for transcription"
JSON_ONLY = "Only 'json' response_format is supported for transcription"
DEFAULT_PROMPT = "Transcribe audio to text"
# std::stof and std::stoul read a leading number and ignore what follows it.
_FLOAT = re.compile(r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)", re.IGNORECASE)
_INT = re.compile(r"\s*[+-]?\d+")


def _field(request: Request, name: str) -> str | None:
    """A text field's value; None when absent or given more than once (b10621 then uses the default)."""
    values = request.form.getlist(name) if request.form else None
    return values[0] if values and len(values) == 1 and isinstance(values[0], str) else None


def _number(name: str, text: str | None, pattern: re.Pattern[str]) -> str | None:
    if text is None:
        return None
    match = pattern.match(text)
    if match is None:
        raise InvalidRequest(f"Field '{name}': cannot read a number from {text!r}")
    return match.group(0).strip()


def chat_body(request: Request) -> tuple[dict[str, Any], bytes]:
    """The chat completion fields a transcription form stands for, and the clip's bytes."""
    media.check_multipart(request.headers.get("content-type", ""), request.body or b"")
    files = request.files.getlist("file") if request.files else None
    if not files:
        raise InvalidRequest(NO_FILE)
    clip = files[-1].body
    response_format = _field(request, "response_format")
    if response_format is not None and response_format != "json":
        raise InvalidRequest(JSON_ONLY)
    prompt = _field(request, "prompt") or DEFAULT_PROMPT
    language = _field(request, "language")
    if language:
        prompt += f" (language: {language})"
    body: dict[str, Any] = {"messages": [{"role": "user", "content": prompt + MARKER}],
                            "stream": _field(request, "stream") == "true"}
    temperature = _number("temperature", _field(request, "temperature"), _FLOAT)
    if temperature is not None:
        body["temperature"] = float(temperature)
    max_tokens = _number("max_tokens", _field(request, "max_tokens"), _INT)
    if max_tokens is not None:
        body["max_tokens"] = max(-1, int(max_tokens))  # stoul wraps a negative count to "no limit"
    return body, clip


def usage(final: FinalEvent) -> dict[str, Any]:
    n_out = len(final.tokens)
    return {"type": "tokens", "input_tokens": final.n_prompt_tokens, "output_tokens": n_out,
            "total_tokens": final.n_prompt_tokens + n_out,
            "input_tokens_details": {"cached_tokens": final.timings.cache_n}}


@bp.post("/v1/audio/transcriptions")
@bp.post("/audio/transcriptions", name="transcriptions_alias")
async def transcriptions(request: Request) -> HTTPResponse | None:
    model = served_model(request)
    if not media_parts.modalities_of(model).audio:  # before any field check, as b10621
        raise NotSupported(NO_AUDIO)
    state = serving(request)
    body, clip = chat_body(request)
    prompt, tokens = chat.render(body, state, model, body["messages"])
    tokens = media_parts.MediaPrompt(tokens, prompt.prompt, [Source("audio", "", False, clip)])
    p = await chat.plan(chat.native_fields(body), state, model, prompt, tokens)
    jobs = gen.submit(p, model, metrics=state.metrics, route=request.path)
    if not p.opts.stream:
        await gen.run(jobs)
        final = jobs[0].final
        assert final is not None
        text = chat.parse_whole(prompt, final.text).content
        return json_response({"type": "transcript.text.done", "text": text, "usage": usage(final)})

    parser = chat.ChatParser(prompt)
    stream = await gen.started(jobs)

    async def frames() -> AsyncIterator[str]:
        async for _, ev in stream:
            if isinstance(ev, ProgressEvent):
                continue
            if isinstance(ev, FinalEvent):
                for diff in parser.finish():
                    if diff.content:
                        yield sse.data({"type": "transcript.text.delta", "delta": diff.content})
                yield sse.data({"type": "transcript.text.done", "text": parser.message.content, "usage": usage(ev)})
                continue
            delta = "".join(d.content for d in parser.feed(ev.text) if d.content)
            yield sse.data({"type": "transcript.text.delta", "delta": delta})
        yield sse.DONE

    await stream_sessions.respond(request, frames(), cancel=lambda: gen.cancel(jobs), ping=sse.ping_interval(p.opts))
    return None  # streamed: the response went out through request.respond
