"""Each family's calls as far as they are written: the view llama-server's partial parse gives of an open region.

A view lists the region's calls whose name is complete, each with its arguments so far: for a family that writes
JSON arguments, the model's own text (less trailing whitespace and a half-written escape, see partial_json); for
one that writes parameters one by one (Qwen3-Coder, MiniMax, GLM, DeepSeek DSML), the JSON object they make, with
each key once its name is written, a string value as it grows and any other value once its parameter closes. On the
complete region the view gives the same arguments as the family's reader (engine.chat.formats), so that what was
streamed is a prefix of the whole call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mlx_lm.tool_parsers import glm47, kimi_k3, minicpm5, minimax_m2, qwen3_coder

from mlxd.engine.chat.call_deltas import CallView
from mlxd.engine.chat.partial_json import elements, members, shown, skip_ws, value_end
from mlxd.engine.chat.reasoning import WHITESPACE, partial_tag_suffix

Tools = Sequence[Mapping[str, Any]]
Partial = Callable[[str, Tools], list[CallView]]


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _raw_arguments(text: str, start: int | None, stop: int | None) -> str | None:
    """The arguments the model wrote from ``start``: verbatim when complete, as far as they can be shown if not."""
    if start is None:
        return ""
    if not text.startswith("{", start):
        return None  # not an object being written (a JSON string of arguments): shown once the call is whole
    return text[start:stop] if stop is not None else shown(text[start:])


def object_call(text: str, pos: int, name_key: str, argument_keys: tuple[str, ...]) -> CallView | None:
    """``{name_key: NAME, argument_key: {...}}`` at ``pos``, once NAME is written."""
    name: Any = None
    start = stop = None
    for key, value_start, value_stop in members(text, pos):
        if key == name_key and value_stop is not None:
            try:
                name = json.loads(text[value_start:value_stop])
            except ValueError:
                return None
        elif key in argument_keys:
            start, stop = value_start, value_stop
    if not isinstance(name, str) or not name:
        return None
    return name, _raw_arguments(text, start, stop)


def object_partial(name_key: str, *argument_keys: str) -> Partial:
    """One call object (Hermes ``{"name": ..., "arguments": {...}}``)."""
    def view(text: str, tools: Tools) -> list[CallView]:
        call = object_call(text, 0, name_key, argument_keys)
        return [] if call is None else [call]
    return view


def list_partial(name_key: str, *argument_keys: str) -> Partial:
    """A JSON array of call objects (Granite, Nemotron v2, Mistral v3, Command R7B)."""
    def view(text: str, tools: Tools) -> list[CallView]:
        calls = []
        for start in elements(text, 0):
            call = object_call(text, start, name_key, argument_keys)
            if call is None:
                break
            calls.append(call)
        return calls
    return view


def sequence_partial(name_key: str, *argument_keys: str) -> Partial:
    """Call objects one after another, a JSON array of them, or one per line (MiniMax M1, Apriel)."""
    listed = list_partial(name_key, *argument_keys)

    def view(text: str, tools: Tools) -> list[CallView]:
        if text.lstrip(WHITESPACE).startswith("["):
            return listed(text, tools)
        calls: list[CallView] = []
        pos = skip_ws(text, 0)
        while pos < len(text) and (call := object_call(text, pos, name_key, argument_keys)) is not None:
            calls.append(call)
            end = value_end(text, pos)
            if end is None:
                break
            pos = skip_ws(text, end)
        return calls
    return view


def apertus_partial(text: str, tools: Tools) -> list[CallView]:
    """``[{"NAME": {...}}]``."""
    calls: list[CallView] = []
    for start in elements(text, 0):
        found = next(members(text, start), None)
        if found is None:
            break
        name, value_start, value_stop = found
        calls.append((name, _raw_arguments(text, value_start, value_stop)))
    return calls


def header_partial(pattern: str, fenced: bool = False) -> Partial:
    """A header naming the function (``pattern``'s group 1), then its JSON arguments (Mistral, DeepSeek's calls,
    Functionary, Kimi K2)."""
    header = re.compile(pattern, re.S)

    def view(text: str, tools: Tools) -> list[CallView]:
        match = header.match(text)
        if match is None:
            return []
        start = skip_ws(text, match.end())
        if start >= len(text):
            return [(match.group(1).strip(WHITESPACE), "")]
        return [(match.group(1).strip(WHITESPACE), _raw_arguments(text, start, value_end(text, start)))]
    return view


def split_partial(begin: str, end: str, call: Partial) -> Partial:
    """Calls each between ``begin`` and ``end`` inside the region (DeepSeek, Kimi K2), the last maybe open."""
    def view(text: str, tools: Tools) -> list[CallView]:
        calls: list[CallView] = []
        pos = 0
        while (at := text.find(begin, pos)) >= 0:
            stop = text.find(end, at)
            body = text[at + len(begin):] if stop < 0 else text[at + len(begin):stop]
            found = call(body, tools)
            calls += found
            if stop < 0 or not found:
                break
            pos = stop + len(end)
        return calls
    return view


# --- families that write their arguments one parameter at a time -------------------------------------------------


@dataclass(frozen=True)
class ParamSyntax:
    """How a family writes a call's parameters, for :func:`params_partial`."""

    call: re.Pattern[str]  # a call's header; group 1 is the name
    call_end: str
    param: re.Pattern[str]  # a parameter's header; group 1 is its name (group 2, when there, read by ``flag``)
    param_end: str  # "{}" stands for the parameter's name
    # "newline": one newline each side is markup (Qwen3-Coder); "strip": all whitespace; "cdata": all whitespace,
    # or a CDATA block kept whole (MiniCPM5); "": none
    trim: str
    is_string: Callable[[str, str, Tools], bool]  # (function, parameter, tools): is the value a JSON string?
    convert: Callable[[str, str, str, Tools], Any]  # (function, parameter, raw value, tools) -> its JSON value
    # Whether a parameter header's group 2 (its written type) says the value is a string (DeepSeek DSML, Kimi K3).
    flag: Callable[[str | None], bool] | None = None


_NUMBER = re.compile(r"-?[0-9]+")


_CDATA_OPEN, _CDATA_CLOSE = "<![CDATA[", "]]>"


def _trim(value: str, trim: str, done: bool) -> str:
    if trim == "cdata":
        if done:
            return str(minicpm5._param_value(value))
        value = value.lstrip(WHITESPACE)
        if _CDATA_OPEN.startswith(value):
            return ""
        if value.startswith(_CDATA_OPEN):
            value = value[len(_CDATA_OPEN):]
            return value[:len(value) - partial_tag_suffix(value, _CDATA_CLOSE)].removesuffix(_CDATA_CLOSE)
        return value.rstrip(WHITESPACE)
    if trim == "strip":  # open: trailing whitespace may be the markup before the closing tag
        return value.strip(WHITESPACE)
    if trim == "newline":
        value = value.removeprefix("\n")
        return value.removesuffix("\n")  # open: the newline may be the markup before the closing tag
    return value


def _call_arguments(text: str, pos: int, function: str, syntax: ParamSyntax, tools: Tools) -> tuple[str, int | None]:
    """The JSON arguments of the call whose parameters begin at ``pos``, and where the call ends (None: open)."""
    parts = ["{"]
    while (param := syntax.param.match(text, pos)) is not None:
        key = param.group(1).strip(WHITESPACE).strip("\"'")
        string = syntax.flag(param.group(2)) if syntax.flag else syntax.is_string(function, key, tools)
        parts.append(("," if len(parts) > 1 else "") + _dump(key) + ":")
        param_end = syntax.param_end.replace("{}", key)  # MiniMax M3 closes a parameter by its name
        close = text.find(param_end, param.end())
        if close < 0:  # the value is being written
            value = text[param.end():]
            value = _trim(value[:len(value) - partial_tag_suffix(value, param_end)], syntax.trim, False)
            if string:
                parts.append('"' + _dump(value)[1:-1])
            elif _NUMBER.fullmatch(value):  # a number streams as written, as llama-server's does
                parts.append(value)
            return "".join(parts), None
        value = _trim(text[param.end():close], syntax.trim, True)
        parts.append(_dump(value) if string else _dump(syntax.convert(function, key, value, tools)))
        pos = close + len(param_end)
    rest = skip_ws(text, pos)
    if syntax.call_end and text.startswith(syntax.call_end, rest):  # else the call ends with its region
        return "".join(parts) + "}", rest + len(syntax.call_end)
    return "".join(parts), None


def params_scan(syntax: ParamSyntax, text: str, tools: Tools) -> tuple[list[CallView], int | None]:
    """The calls of a region written parameter by parameter, and where the last complete one ends (None: the last
    is still open)."""
    calls: list[CallView] = []
    pos: int | None = 0
    while pos is not None and (call := syntax.call.match(text, pos)) is not None:
        name = call.group(1).strip(WHITESPACE).strip("\"'")
        try:
            arguments, pos = _call_arguments(text, call.end(), name, syntax, tools)
        except (ValueError, TypeError, SyntaxError):
            return calls, None
        calls.append((name, arguments))
    return calls, pos


def params_partial(syntax: ParamSyntax) -> Partial:
    """The calls of a region written parameter by parameter, as far as they are written."""
    def view(text: str, tools: Tools) -> list[CallView]:
        return params_scan(syntax, text, tools)[0]
    return view


def _properties(function: str, tools: Tools) -> dict[str, Any]:
    for tool in tools:
        spec = tool.get("function") or {}
        if spec.get("name") == function:
            properties = (spec.get("parameters") or {}).get("properties") or {}
            return properties if isinstance(properties, dict) else {}
    return {}


def _qwen3_is_string(function: str, key: str, tools: Tools) -> bool:
    schema = _properties(function, tools).get(key)
    if not schema:
        return True  # mlx-lm keeps an undeclared parameter's text
    return "type" in schema and str(schema["type"]).strip().lower() in {"string", "str", "text", "varchar", "char",
                                                                        "enum"}


def _glm_is_string(function: str, key: str, tools: Tools) -> bool:
    return key in glm47._get_string_arg_names(function, list(tools))


def _minimax_is_string(function: str, key: str, tools: Tools) -> bool:
    types = minimax_m2._get_param_types_from_config(key, _properties(function, tools))
    return bool(types) and all(t.lower() in ("string", "str", "text") for t in types)


def _json_value(function: str, key: str, value: str, tools: Tools) -> Any:
    return json.loads(value)


QWEN3_CODER = ParamSyntax(
    call=re.compile(r"\s*<function=([^\s<>]+)>"), call_end="</function>",
    param=re.compile(r"\s*<parameter=([^\s<>]+)>"), param_end="</parameter>", trim="newline",
    is_string=_qwen3_is_string,
    convert=lambda f, k, v, tools: qwen3_coder._convert_param_value(v, k, _properties(f, tools)))
MINIMAX_M2 = ParamSyntax(
    call=re.compile(r"\s*<invoke name=([^>]+)>"), call_end="</invoke>",
    param=re.compile(r"\s*<parameter name=([^>]+)>"), param_end="</parameter>", trim="strip",
    is_string=_minimax_is_string,
    convert=lambda f, k, v, tools: minimax_m2._convert_param_value_with_types(
        v, minimax_m2._get_param_types_from_config(k, _properties(f, tools))))
GLM = ParamSyntax(
    call=re.compile(r"\s*([^<\s]+)\s*(?=<arg_key>)"), call_end="",
    param=re.compile(r"\s*<arg_key>(.*?)</arg_key>\s*<arg_value>", re.S), param_end="</arg_value>", trim="strip",
    is_string=_glm_is_string, convert=lambda f, k, v, tools: glm47._deserialize(v))
DSML = ParamSyntax(
    call=re.compile(r'\s*<｜DSML｜invoke name="([^"]+)">'), call_end="</｜DSML｜invoke>",
    param=re.compile(r'\s*<｜DSML｜parameter name="([^"]+)" string="(true|false)">'), param_end="</｜DSML｜parameter>",
    trim="", is_string=lambda f, k, tools: True, convert=_json_value, flag=lambda written: written == "true")
HY3 = ParamSyntax(
    call=re.compile(r"\s*<tool_call:opensource>\s*([^<\s]+)\s*<tool_sep:opensource>"),
    call_end="</tool_call:opensource>",
    param=re.compile(r"\s*<arg_key:opensource>(.*?)</arg_key:opensource>\s*<arg_value:opensource>", re.S),
    param_end="</arg_value:opensource>", trim="strip", is_string=_glm_is_string,
    convert=lambda f, k, v, tools: glm47._deserialize(v))
MINICPM5 = ParamSyntax(  # the region's opening marker is "<function name=": a call is its name, then parameters
    call=re.compile(r"""\s*("[^"]*"|'[^']*'|[^\s"'<>]+)\s*>"""), call_end="",
    param=re.compile(r"""\s*<param\s+name\s*=\s*("[^"]*"|'[^']*'|[^\s"'<>]+)\s*>"""), param_end="</param>",
    trim="cdata", is_string=_minimax_is_string,
    convert=lambda f, k, v, tools: minimax_m2._convert_param_value_with_types(
        v, minimax_m2._get_param_types_from_config(k, _properties(f, tools))))
KIMI_K3 = ParamSyntax(
    call=re.compile(r'\s*<\|open\|>call[^<]*?\btool="([^"]*)"[^<]*?<\|sep\|>'), call_end="<|close|>call<|sep|>",
    param=re.compile(r'\s*<\|open\|>argument[^<]*?\bkey="([^"]*)"(?:[^<]*?\btype="(\w+)")?[^<]*?<\|sep\|>'),
    param_end="<|close|>argument<|sep|>", trim="", is_string=lambda f, k, tools: True,
    convert=lambda f, k, v, tools: kimi_k3._decode_value(v, "json"),
    flag=lambda written: (written or "string") == "string")
_NS = re.escape("]<]minimax[>[")
MINIMAX_M3 = ParamSyntax(  # every tag after the namespace token; a parameter is a tag of its own name
    call=re.compile(r"\s*" + _NS + r'<invoke name="([^"]+)">'), call_end="]<]minimax[>[</invoke>",
    param=re.compile(r"\s*" + _NS + r"<(?!/)([\w.-]+)>"), param_end="]<]minimax[>[</{}>", trim="",
    is_string=_minimax_is_string,
    convert=lambda f, k, v, tools: minimax_m2._convert_param_value_with_types(
        v, minimax_m2._get_param_types_from_config(k, _properties(f, tools))))
