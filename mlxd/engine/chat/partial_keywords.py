"""Calls written as a function call with keyword arguments, as far as they are written: Gemma 4's
``call:NAME{key:<|"|>text<|"|>,n:3}`` and LFM2's pythonic ``[NAME(key="text", n=3)]``.

The view is the JSON object the keywords make (engine.chat.partial_calls): a key once it is written, a string as it
grows, an integer as written, any other value once it ends; on a complete call, the same JSON as mlx-lm's readers
give, so that the streamed pieces are a prefix of the whole call's arguments.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlx_lm.tool_parsers import gemma4, pythonic

from mlxd.engine.chat.call_deltas import CallView
from mlxd.engine.chat.partial_calls import Partial, Tools
from mlxd.engine.chat.reasoning import WHITESPACE, partial_tag_suffix

_INTEGER = re.compile(r"-?[0-9]+")


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class KeywordSyntax:
    """How a family writes a call's keyword arguments."""

    call: re.Pattern[str]  # a call's opening, up to its first argument; group 1 is the name
    key: re.Pattern[str]  # a key and its separator; group 1 is the key
    close: str  # what ends the arguments
    quotes: tuple[str, ...]  # the string delimiters
    escapes: bool  # whether a backslash escapes the next character inside a string (Python's rules)
    convert: Callable[[str], Any]  # a whole non-string value's text -> its JSON value
    after: re.Pattern[str]  # what may follow a call before the next (or the end)


def _string(text: str, pos: int, quote: str, escapes: bool) -> tuple[str, int | None] | None:
    """The value of the string opening at ``pos`` so far, and where it ends (None: still open); None when it holds
    an escape these views do not read (the call is then shown once whole)."""
    out: list[str] = []
    i = pos + len(quote)
    simple = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'"}
    while i < len(text):
        if text.startswith(quote, i):
            return "".join(out), i + len(quote)
        if escapes and text[i] == "\\":
            if i + 1 >= len(text):
                break  # half an escape: held
            if text[i + 1] not in simple:
                return None
            out.append(simple[text[i + 1]])
            i += 2
            continue
        out.append(text[i])
        i += 1
    held = "".join(out)
    return held[:len(held) - partial_tag_suffix(held, quote)], None


def _value_end(text: str, pos: int, syntax: KeywordSyntax) -> int | None:
    """The end of a non-string value at ``pos``: the separator or close at depth 0 (None: not yet written)."""
    depth, i = 0, pos
    while i < len(text):
        quote = next((q for q in syntax.quotes if text.startswith(q, i)), None)
        if quote is not None:
            found = _string(text, i, quote, syntax.escapes)
            if found is None or found[1] is None:
                return None
            i = found[1]
            continue
        ch = text[i]
        if depth == 0 and (ch == "," or text.startswith(syntax.close, i)):
            return i
        depth += ch in "{[("
        depth -= ch in "}])"
        i += 1
    return None


def _arguments(text: str, pos: int, syntax: KeywordSyntax) -> tuple[str, int | None]:
    """The JSON arguments of the call whose keywords begin at ``pos``, and where the call ends (None: open)."""
    parts = ["{"]
    while True:
        i = len(text) - len(text[pos:].lstrip(WHITESPACE))
        if text.startswith(syntax.close, i):
            return "".join(parts) + "}", i + len(syntax.close)
        key = syntax.key.match(text, i)
        if key is None:
            return "".join(parts), None
        parts.append(("," if len(parts) > 1 else "") + _dump(key.group(1)) + ":")
        start = len(text) - len(text[key.end():].lstrip(WHITESPACE))
        quote = next((q for q in syntax.quotes if text.startswith(q, start)), None)
        if quote is not None:
            found = _string(text, start, quote, syntax.escapes)
            if found is None:
                raise ValueError("an escape this view does not read")
            value, end = found
            parts.append('"' + _dump(value)[1:-1] + ('"' if end is not None else ""))
        else:
            end = _value_end(text, start, syntax)
            raw = text[start:end].strip(WHITESPACE) if end is not None else text[start:].strip(WHITESPACE)
            if end is not None:
                parts.append(_dump(syntax.convert(raw)))
            elif _INTEGER.fullmatch(raw):
                parts.append(raw)
        if end is None:
            return "".join(parts), None
        pos = len(text) - len(text[end:].lstrip(WHITESPACE))
        if text.startswith(",", pos):
            pos += 1


def keyword_partial(syntax: KeywordSyntax) -> Partial:
    """The calls of a region written as keyword calls, as far as they are written."""
    def view(text: str, tools: Tools) -> list[CallView]:
        calls: list[CallView] = []
        pos: int | None = 0
        while pos is not None and (call := syntax.call.match(text, pos)) is not None:
            try:
                arguments, pos = _arguments(text, call.end(), syntax)
            except (ValueError, TypeError, SyntaxError):
                break
            calls.append((call.group(1), arguments))
            if pos is not None:
                after = syntax.after.match(text, pos)
                pos = after.end() if after else None
        return calls
    return view


def _gemma4_value(raw: str) -> Any:
    return json.loads(gemma4._gemma4_args_to_json("{v:" + raw + "}"))["v"]


def _python_value(raw: str) -> Any:
    return ast.literal_eval(pythonic._JSONLiterals().visit(ast.parse(raw, mode="eval").body))


GEMMA4 = KeywordSyntax(call=re.compile(r"\s*call:([\w-]+)\{"), key=re.compile(r"(\w+):"), close="}",
                       quotes=('<|"|>',), escapes=False, convert=_gemma4_value, after=re.compile(r"\s*"))
LFM2 = KeywordSyntax(call=re.compile(r"\s*\[?\s*([\w.]+)\("), key=re.compile(r"(\w+)\s*=\s*"), close=")",
                     quotes=('"', "'"), escapes=True, convert=_python_value, after=re.compile(r"\s*,?\s*"))
