"""Server-sent event streams as the tests read them: a list of (event name or None, data text) frames."""

from __future__ import annotations

import json
from typing import Any


def frames(text: str) -> list[tuple[str | None, str]]:
    """Split an SSE body into frames; comment lines (pings) are skipped."""
    out: list[tuple[str | None, str]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name: str | None = None
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[len("event:"):].strip()
            elif line.startswith("data:"):
                data.append(line[len("data:"):].strip())
        if data:
            out.append((name, "\n".join(data)))
    return out


def payloads(text: str) -> list[Any]:
    """The JSON data of every frame, ``[DONE]`` left out."""
    return [json.loads(data) for _, data in frames(text) if data != "[DONE]"]
