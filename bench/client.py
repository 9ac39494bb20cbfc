"""One streaming ``/v1/completions`` client for every HTTP benchmark, so that every server is timed the same way.

mlxd, ``mlx_lm.server`` and llama-server stream OpenAI text-completion chunks and, with
``stream_options.include_usage``, end with a chunk that carries ``usage``; the token count comes from there and is
checked against ``max_tokens``.

Two transports read the same stream: httpx (the default), and ``RawClient``, asyncio's streams with the chunked
body scanned rather than decoded chunk by chunk. On a 2-vCPU machine the httpx client alone saturates a vCPU at
about 5,500 chunks/s, so past that every server measures the client; the raw client reads several times as many.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import AsyncIterator
from typing import Any

import httpx

from bench.common import percentile


def eos_bias(checkpoint: Path) -> dict[str, float]:
    """A ``logit_bias`` that bans every end-of-generation token, so that each request runs to ``max_tokens``.

    ``ignore_eos`` is llama-server's field only; ``logit_bias`` is understood by both servers.
    """
    ids: set[int] = set()
    for name in ("config.json", "generation_config.json"):
        path = checkpoint / name
        if path.exists():
            value = json.loads(path.read_text()).get("eos_token_id")
            ids.update(value if isinstance(value, list) else [value] if value is not None else [])
    return {str(i): -100.0 for i in sorted(ids)}


@dataclass
class StreamResult:
    """One streamed request as the client saw it; times are seconds from ``started``."""

    started: float
    ttft: float = 0.0
    last: float = 0.0
    tokens: int = 0  # usage.completion_tokens from the final chunk
    chunks: int = 0  # chunks that carried text
    finish_reason: str | None = None
    error: str | None = None

    @property
    def decode_tps(self) -> float:
        """Tokens/s from the first token to the last (prefill excluded)."""
        span = self.last - self.ttft
        return (self.tokens - 1) / span if self.tokens > 1 and span > 0 else 0.0


def _body(prompt: str, max_tokens: int, bias: dict[str, float]) -> dict[str, Any]:
    return {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True}, "logit_bias": bias}


async def _body_blocks(reader: asyncio.StreamReader, chunked: bool) -> AsyncIterator[bytes]:
    """The response body as it arrives: chunk by chunk, or (a server that streams without chunks, as Python's
    http.server does for mlx_lm.server) block by block until the connection closes."""
    while True:
        if not chunked:
            data = await reader.read(65536)
            if not data:
                return
            yield data
            continue
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            return
        yield (await reader.readexactly(size + 2))[:-2]  # the chunk, less its CRLF


class RawClient:
    """A minimal HTTP/1.1 client for the streamed completion: a connection per request, the chunked body scanned for
    frames with text, only the frames that finish the stream parsed as JSON."""

    def __init__(self, base_url: str) -> None:
        address = base_url.split("://", 1)[1].rstrip("/")
        host, _, port = address.rpartition(":")
        self.host, self.port = host, int(port)

    async def __aenter__(self) -> "RawClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        return None

    async def stream_completion(self, prompt: str, max_tokens: int, bias: dict[str, float],
                                result: StreamResult) -> StreamResult:
        payload = json.dumps(_body(prompt, max_tokens, bias)).encode()
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nConnection: close\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n").encode()
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            writer.write(head + payload)
            headers = await reader.readuntil(b"\r\n\r\n")
            status_line = headers.split(b"\r\n", 1)[0]
            if b" 200 " not in status_line:
                result.error = f"HTTP {status_line!r}"
                return result
            tail = b""
            async for data in _body_blocks(reader, chunked=b"transfer-encoding: chunked" in headers.lower()):
                texts = sum(data.count(b'"text":' + gap + b'"') - data.count(b'"text":' + gap + b'""')
                            for gap in (b"", b" "))  # compact JSON, or Python's json.dumps (mlx_lm.server)
                if texts:
                    now = time.perf_counter() - result.started
                    result.chunks += texts
                    result.ttft = result.ttft or now
                    result.last = now
                tail = (tail + data)[-8192:]
            for frame in tail.split(b"\n\n"):  # the last frames: finish reason, usage, or an error
                frame = frame.strip()
                if not frame.startswith(b"data: {"):
                    continue
                chunk = json.loads(frame[6:])
                if "error" in chunk:
                    result.error = str(chunk["error"])[:200]
                for choice in chunk.get("choices") or []:
                    result.finish_reason = choice.get("finish_reason") or result.finish_reason
                if chunk.get("usage"):
                    result.tokens = int(chunk["usage"]["completion_tokens"])
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            writer.close()
        return result


async def stream_completion(client: httpx.AsyncClient | RawClient, prompt: str, max_tokens: int,
                            bias: dict[str, float], started: float | None = None) -> StreamResult:
    """POST one streamed completion (greedy) and read it to the end; failures are recorded, never raised."""
    result = StreamResult(started=time.perf_counter() if started is None else started)
    if isinstance(client, RawClient):
        return await client.stream_completion(prompt, max_tokens, bias, result)
    body = _body(prompt, max_tokens, bias)
    try:
        async with client.stream("POST", "/v1/completions", json=body) as response:
            if response.status_code != 200:
                result.error = f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    result.error = str(chunk["error"])[:200]
                    return result
                now = time.perf_counter() - result.started
                for choice in chunk.get("choices") or []:
                    if choice.get("text"):
                        result.chunks += 1
                        result.ttft = result.ttft or now
                        result.last = now
                    result.finish_reason = choice.get("finish_reason") or result.finish_reason
                if chunk.get("usage"):
                    result.tokens = int(chunk["usage"]["completion_tokens"])
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result


def complete(result: StreamResult, max_tokens: int) -> bool:
    """Whether a request ran to ``max_tokens`` without an error (not failed, not truncated)."""
    return result.error is None and result.tokens == max_tokens and result.finish_reason == "length"


@dataclass
class RoundResult:
    """A round of concurrent requests: aggregate tokens/s and time to first token across them."""

    streams: int
    elapsed: float
    results: list[StreamResult]

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.results)

    @property
    def aggregate_tps(self) -> float:
        return self.tokens / self.elapsed

    def ttft(self, q: float) -> float:
        return percentile([r.ttft for r in self.results], q)


async def concurrent_round(client: httpx.AsyncClient | RawClient, prompts: list[str], max_tokens: int,
                           bias: dict[str, float], stagger_s: float = 0.0) -> RoundResult:
    """Send all ``prompts`` and wait for every stream: at once, or the i-th ``i * stagger_s`` seconds after the
    first; TTFT is measured from each request's own start, aggregate tokens/s from the first start to the last
    token."""

    async def one(i: int, prompt: str) -> StreamResult:
        await asyncio.sleep(i * stagger_s)
        return await stream_completion(client, prompt, max_tokens, bias)

    t0 = time.perf_counter()
    results = await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    return RoundResult(len(prompts), time.perf_counter() - t0, list(results))


def async_client(base_url: str, streams: int, raw: bool = False) -> httpx.AsyncClient | RawClient:
    """An httpx client with room for ``streams`` connections and no read timeout a slow CPU run could trip (``raw``:
    a ``RawClient``)."""
    if raw:
        return RawClient(base_url)
    limits = httpx.Limits(max_connections=streams + 4, max_keepalive_connections=streams + 4)
    return httpx.AsyncClient(base_url=base_url, limits=limits, timeout=httpx.Timeout(600.0, connect=10.0))
