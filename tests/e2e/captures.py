"""Real responses of llama-server b10621 (see captures/README.md), parsed for comparison with mlxd's.

Each file holds the request (request line, headers, body) and, after ``### RESPONSE``, the raw response.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CAPTURES = Path(__file__).parent / "captures"


@dataclass(frozen=True)
class Capture:
    name: str
    method: str
    path: str
    request_headers: dict[str, str]
    request_body: bytes
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def _split_head(block: str) -> tuple[list[str], str]:
    head, _, body = block.partition("\n\n")
    return head.strip("\n").splitlines(), body


def _headers(lines: list[str]) -> dict[str, str]:
    out = {}
    for line in lines:
        name, _, value = line.partition(":")
        out[name.strip().lower()] = value.strip()
    return out


def load(name: str, root: Path = CAPTURES) -> Capture:
    """The capture ``NAME.txt`` (under ``root``: ``captures/``, or ``captures-router/`` for the router's)."""
    text = (root / f"{name}.txt").read_text(encoding="utf-8")
    request, _, response = text.partition("### RESPONSE")
    request = request.replace("### REQUEST", "", 1).strip("\n")
    req_lines, req_body = _split_head(request)
    method, path, _ = req_lines[0].split(" ", 2)
    resp_lines, resp_body = _split_head(response.strip("\n"))
    status = int(resp_lines[0].split(" ")[1])
    return Capture(
        name=name,
        method=method,
        path=path,
        request_headers=_headers(req_lines[1:]),
        request_body=req_body.strip("\n").encode("utf-8"),
        status=status,
        headers=_headers(resp_lines[1:]),
        body=resp_body.strip("\n").encode("utf-8"),
    )


def names() -> list[str]:
    return sorted(p.stem for p in CAPTURES.glob("*.txt") if p.stem != "README")


def key_set(value: Any, prefix: str = "") -> set[str]:
    """Every key path of a JSON value, recursively (list items merged under ``[]``)."""
    keys: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{prefix}.{key}" if prefix else key
            keys.add(path)
            keys |= key_set(item, path)
    elif isinstance(value, list):
        for item in value:
            keys |= key_set(item, f"{prefix}[]")
    return keys
