"""JSON text as a model writes it: where a value ends (or that it has not ended yet), and how much of an unfinished
value can be shown.

llama-server streams a tool call's arguments as the model writes them: the text so far, less trailing whitespace
and less an escape sequence still being written, so that every piece it sends is a prefix of the final arguments.
These scanners find the spans; they do not validate (the whole call is read by ``json`` once its region closes).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from mlxd.engine.chat.reasoning import WHITESPACE

_SCALAR = re.compile(r"[^,\]}\s]+")
_STRING_REST = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"', re.S)  # a string's text after its quote, and the quote
_UNICODE_TAIL = re.compile(r"\\u[0-9a-fA-F]{0,3}$")


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def skip_ws(text: str, pos: int) -> int:
    """The first position at or after ``pos`` that is not whitespace."""
    while pos < len(text) and text[pos] in WHITESPACE:
        pos += 1
    return pos


def string_end(text: str, pos: int) -> int | None:
    """The end of the JSON string opening at ``pos`` (a ``"``), or None while it is not closed."""
    rest = _STRING_REST.match(text, pos + 1)
    return rest.end() if rest else None


def value_end(text: str, pos: int) -> int | None:
    """The end of the JSON value at ``pos`` (leading whitespace skipped), or None while it is unfinished (or not
    JSON: the region's reader decides once it closes)."""
    i = skip_ws(text, pos)
    if i >= len(text):
        return None
    if text[i] == '"':
        return string_end(text, i)
    if text[i] in "{[":
        # json's C scanner: a stream re-reads the open region at each token, which must stay cheap for long
        # arguments (a file's text written as a tool call).
        try:
            return _DECODER.raw_decode(text, i)[1]
        except ValueError:
            return None
    scalar = _SCALAR.match(text, i)
    end = scalar.end() if scalar else i
    return end if end < len(text) else None  # a number or literal ends at the next delimiter


def shown(text: str) -> str:
    """What of an unfinished JSON text can be streamed: less trailing whitespace and a half-written escape."""
    text = text.rstrip(WHITESPACE)
    unicode = _UNICODE_TAIL.search(text, max(0, len(text) - 6))
    cut = unicode.start() if unicode else len(text)
    run = cut - len(text[:cut].rstrip("\\"))  # the backslashes before ``cut``: an odd run escapes what follows
    if unicode:
        return text[:cut] if run % 2 == 0 else text
    return text[:-1] if run % 2 else text


def _at(text: str, pos: int, char: str) -> int | None:
    """The position after ``char`` if it is the next non-whitespace character, else None."""
    i = skip_ws(text, pos)
    return i + 1 if text.startswith(char, i) else None


def _after(text: str, stop: int | None) -> int | None:
    """Where the next item of a container begins, after a value ending at ``stop`` and its comma (None: no more)."""
    return None if stop is None else _at(text, stop, ",")


def members(text: str, pos: int) -> Iterator[tuple[str, int, int | None]]:
    """``(key, value_start, value_end)`` of the object at ``pos`` as far as it is written (``value_end`` None
    while that value is unfinished); stops at the first key not yet complete, or at text that is not an object."""
    i = _at(text, pos, "{")
    while i is not None:
        i = skip_ws(text, i)
        end = string_end(text, i) if text.startswith('"', i) else None
        colon = None if end is None else _at(text, end, ":")
        if end is None or colon is None or (start := skip_ws(text, colon)) >= len(text):
            return
        try:
            key = json.loads(text[i:end])
        except ValueError:  # a key that is not JSON text: nothing more of this object can be shown
            return
        stop = value_end(text, start)
        yield key, start, stop
        i = _after(text, stop)


def elements(text: str, pos: int) -> Iterator[int]:
    """The start of each element of the array at ``pos``, as far as the array is written."""
    i = _at(text, pos, "[")
    while i is not None:
        i = skip_ws(text, i)
        if i >= len(text) or text[i] == "]":
            return
        yield i
        i = _after(text, value_end(text, i))
