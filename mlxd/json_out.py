"""JSON as mlxd writes it on every listener: raw UTF-8, and non-finite numbers as ``null``.

Python's encoder writes ``NaN``/``Infinity``, which no JSON parser accepts; llama-server's (nlohmann's) writes
them as ``null``. A leaf beside ``mlxd.errors``: the public API, its streams and the admin API all encode here.
"""

from __future__ import annotations

import json
import math
from json.encoder import encode_basestring
from typing import Any, Callable

COMPACT = (",", ":")


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity (at any depth) replaced by None; other values are returned as they are."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


# The compact encoder, built once: json.dumps with any argument of its own builds one per call.
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=COMPACT, allow_nan=False)


def dumps(payload: Any, *, separators: tuple[str, str] | None = COMPACT, indent: int | None = None) -> str:
    """``payload`` as JSON text; the common all-finite case costs one encoding pass."""
    try:
        if separators == COMPACT and indent is None:
            return _COMPACT.encode(payload)
        return json.dumps(payload, ensure_ascii=False, separators=separators, indent=indent, allow_nan=False)
    except ValueError:  # a NaN or an infinity somewhere: encode again with them as null
        return json.dumps(finite(payload), ensure_ascii=False, separators=separators, indent=indent)


def dumps_long_list(items: list[Any], chunk: int = 8192) -> str:
    """A long list as JSON, encoded a chunk at a time: the C encoder holds the GIL for a whole call, so one call
    over millions of items would stall every other thread (the event loop's included) for as long."""
    if len(items) <= chunk:
        return dumps(items)
    return "[" + ",".join(dumps(items[i:i + chunk])[1:-1] for i in range(0, len(items), chunk)) + "]"


# Strings no payload of mlxd's holds (control characters each side), to mark where ``template``'s values go.
SLOT = "\x00slot\x00"
SLOT2 = "\x00slot2\x00"
SLOT3 = "\x00slot3\x00"


def _encode(value: Any) -> str:
    """``value`` as ``dumps`` writes it inside a payload: strings and integers by the encoder's own functions."""
    kind = type(value)
    if kind is str:
        return encode_basestring(value)  # what dumps(ensure_ascii=False) calls for every string
    if kind is int:
        return int.__repr__(value)
    if kind is list:
        return "[" + ",".join(_encode(item) for item in value) + "]"
    return dumps(value)


def template(payload: Any, *slots: str) -> Callable[..., str]:
    """``dumps`` of ``payload`` as a function of the values that take the place of its ``slots`` (default: ``SLOT``),
    given in the order of ``slots``: the rest is encoded once, then each call encodes only its values. A streamed
    chunk differs from the one before by its text (and a count or two) alone: framed for SSE, a text completion's
    chunk costs the event loop 3.5 us a token through its dict and ``dumps`` and 0.19 us this way, a ``/completion``
    partial 5.6 us through its model and 0.7 this way (docs/benchmarks.md, section 7)."""
    text = dumps(payload)
    markers = [dumps(slot) for slot in slots or (SLOT,)]
    if any(text.count(marker) != 1 for marker in markers):
        raise ValueError("template: the payload must hold each slot exactly once")
    if len(markers) == 1:
        head, _, tail = text.partition(markers[0])
        return lambda value: head + _encode(value) + tail
    found = sorted((text.index(marker), i, len(marker)) for i, marker in enumerate(markers))
    pieces, order, pos = [], [], 0
    for at, i, size in found:
        pieces.append(text[pos:at])
        order.append(i)
        pos = at + size
    last = text[pos:]

    def render(*values: Any) -> str:
        out = []
        for piece, i in zip(pieces, order):
            out.append(piece)
            out.append(_encode(values[i]))
        out.append(last)
        return "".join(out)

    return render
