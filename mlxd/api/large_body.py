"""Large answers sent without holding the event loop (issue 28, finding 5).

A 10 MB ``/tokenize`` with pieces answers 143 MB of JSON. Built on the loop, encoded there, and handed to the
transport in one piece, it stalled ``/health`` for a second: the text's encoding, sanic joining the head to the
body, and the transport's copy of what the socket did not take at once are each a pass over 143 MB. Here the body
is built and encoded on the offload pool, and a body over CHUNK_BYTES is streamed in CHUNK_BYTES pieces with its
``Content-Length`` (not chunked: the answer is byte-for-byte what one write would send), each piece waiting for
the socket to drain, so the loop never copies more than one piece at a time and the process holds one copy.
"""

from __future__ import annotations

from typing import Any

from sanic import HTTPResponse, Request

from mlxd.api import offload
from mlxd.api.errors import JSON_CONTENT_TYPE, dumps

CHUNK_BYTES = 1 << 20
# Items of a long list encoded per part: one part's encoding holds the GIL for a few ms at most.
PART_ITEMS = 8192


async def send_bytes(request: Request, body: bytes, content_type: str = JSON_CONTENT_TYPE) -> HTTPResponse | None:
    """``body`` as the response: returned whole when small, else streamed here (the route then returns None)."""
    if len(body) <= CHUNK_BYTES:
        return HTTPResponse(body, content_type=content_type)
    view = memoryview(body)
    return await send_parts(request, [bytes(view[i:i + CHUNK_BYTES]) for i in range(0, len(body), CHUNK_BYTES)],
                            content_type)


async def send_parts(request: Request, parts: list[bytes],
                     content_type: str = JSON_CONTENT_TYPE) -> HTTPResponse | None:
    """The concatenation of ``parts`` as the response, each part sent as it is. A builder that makes its answer in
    parts never joins 143 MB in one C call, which would hold the GIL, and so the event loop, for as long."""
    size = sum(len(part) for part in parts)
    if size <= CHUNK_BYTES:
        return HTTPResponse(b"".join(parts), content_type=content_type)
    response = await request.respond(content_type=content_type, headers={"content-length": str(size)})
    for part in parts:
        await response.send(part)
    await response.eof()
    return None


def long_list_parts(prefix: str, items: list[Any], suffix: str, chunk: int = PART_ITEMS) -> list[bytes]:
    """``prefix + JSON(items) + suffix`` as encoded parts of ``chunk`` items each (mlxd.json_out.dumps_long_list,
    never joined)."""
    parts = [(prefix + "[").encode()]
    for start in range(0, len(items), chunk):
        text = dumps(items[start:start + chunk])[1:-1]
        parts.append(((("," if start else "") + text)).encode())
    parts.append(("]" + suffix).encode())
    return parts


def release_list(items: list[Any], chunk: int = PART_ITEMS * 8) -> None:
    """Empty ``items`` from its end a slice at a time. Dropping a list of millions of objects frees them all in one
    C loop with the GIL held (57 ms for the 4 million ids of a 10 MB text); slice by slice, other threads run in
    between. Call it on a worker thread, where the list's last reference is."""
    while items:
        del items[-chunk:]


def _encoded(payload: Any) -> bytes:
    return dumps(payload).encode()


async def send_json(request: Request, payload: Any) -> HTTPResponse | None:
    """``payload`` as JSON, encoded on the offload pool and sent with :func:`send_bytes`."""
    return await send_bytes(request, await offload.run(_encoded, payload))
