"""The grammar of one tool call in each family's format (Lark for llguidance), for forcing calls.

``tool_choice: "required"`` or a named function constrains the answer to calls from its first token; ``"auto"``
makes the same grammar lazy, woken by the format's opening marker, so that a call the model starts on its own is
well-formed (llama-server's lazy grammar). A call's arguments follow the function's ``parameters`` schema: as one
JSON value in the JSON formats; in the XML-like formats (Qwen3-Coder, GLM, MiniMax, Seed-OSS, DeepSeek V3.2,
Gemma 4) as one element per required parameter, a string parameter's text on one line and any other as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

Marker = Callable[[str], str]  # a literal's Lark spelling: quoted text, or a special token's bare form
Json = Callable[[Mapping[str, Any]], str]  # a schema's Lark spelling (%json {...})

# A string parameter's value in the XML-like formats: one line without markup, of bounded length.
_TEXT = r"/[^<\n]{1,64}/"


def _closed(schema: Any) -> Any:
    """An object schema that does not say whether it takes more properties takes none, as llama.cpp's schema
    grammars read it (an open object would let a model write keys no tool asked for)."""
    if not isinstance(schema, Mapping):
        return schema
    out = dict(schema)
    if isinstance(out.get("properties"), Mapping):
        out["properties"] = {k: _closed(v) for k, v in out["properties"].items()}
        out.setdefault("additionalProperties", False)
    if isinstance(out.get("items"), Mapping):
        out["items"] = _closed(out["items"])
    return out


def _params(function: Mapping[str, Any]) -> Mapping[str, Any]:
    parameters = function.get("parameters")
    return _closed(parameters) if isinstance(parameters, Mapping) and parameters else {"type": "object"}


def _required(function: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The required parameters, in the order the schema lists its properties."""
    params = _params(function)
    properties = params.get("properties")
    required = params.get("required")
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        return []
    return [(name, schema if isinstance(schema, Mapping) else {}) for name, schema in properties.items()
            if name in required]


def _is_string(schema: Mapping[str, Any]) -> bool:
    return schema.get("type") == "string" and not schema.get("enum") and "const" not in schema


def _q(text: str) -> str:
    return json.dumps(text)


def _xml(open_: Callable[[str], str], close: str | Callable[[str], str], js: Json, string_open: str = "",
         string_close: str = "", json_open: Callable[[str], str] | None = None) -> Callable[[Mapping[str, Any]], str]:
    """One element per required parameter: ``open_(name) VALUE close`` (``close``: text, or one per name)."""
    def params(function: Mapping[str, Any]) -> str:
        parts = []
        for name, schema in _required(function):
            end = close(name) if callable(close) else close
            if _is_string(schema):
                parts.append(f"{_q(open_(name) + string_open)} {_TEXT} {_q(string_close + end)}")
            else:
                start = (json_open or open_)(name)
                parts.append(f"{_q(start)} {js(schema)} {_q(end)}")
        return " ".join(parts) if parts else '""'
    return params


# Formats whose calls are JSON objects naming the function, by their region markers ("" : none closes it).
_ONE_OBJECT = {"hermes": ("<tool_call>", "</tool_call>"), "minimax-m1": ("<tool_calls>", "</tool_calls>")}
_ONE_LISTED = {"mistral-v3": ("[TOOL_CALLS]", ""), "granite": ("<|tool_call|>", ""),
               "nemotron-v2": ("<TOOLCALL>", "</TOOLCALL>"), "apriel": ("<tool_calls>", "</tool_calls>")}


def call_grammar(fmt: str, function: Mapping[str, Any], m: Marker, js: Json) -> str:
    """The Lark expression of one call (with its region markers) to ``function`` in the format ``fmt``."""
    name = function["name"]
    params = _params(function)
    one = {"name": {"const": name}}

    def array(item: Mapping[str, Any], required: list[str]) -> str:
        return js({"type": "array", "minItems": 1, "maxItems": 1, "items": {
            "type": "object", "properties": item, "required": required, "additionalProperties": False}})

    if fmt in _ONE_OBJECT:  # {"name": ..., "arguments": {...}} on a line of its own inside the region
        start, end = _ONE_OBJECT[fmt]
        body = js({"type": "object", "properties": {**one, "arguments": params}, "required": ["name", "arguments"],
                   "additionalProperties": False})
        return f'{m(start)} "\\n" {body} "\\n" {m(end)}'
    if fmt in _ONE_LISTED:  # [{"name": ..., "arguments": {...}}] after the opening marker
        start, end = _ONE_LISTED[fmt]
        listed = array({**one, "arguments": params}, ["name", "arguments"])
        return f"{m(start)} {listed} {m(end)}" if end else f"{m(start)} {listed}"
    if fmt == "qwen3-coder":
        inner = _xml(lambda p: f"<parameter={p}>\n", "\n</parameter>\n", js)(function)
        head = _q("\n<function=" + name + ">\n")
        return f'{m("<tool_call>")} {head} {inner} "</function>\\n" {m("</tool_call>")}'
    if fmt == "seed-oss":
        inner = _xml(lambda p: f"<parameter={p}>", "</parameter>\n", js)(function)
        head = _q("\n<function=" + name + ">\n")
        return f'{m("<seed:tool_call>")} {head} {inner} "</function>\\n" {m("</seed:tool_call>")}'
    if fmt == "glm":
        inner = _xml(lambda p: f"<arg_key>{p}</arg_key>\n<arg_value>", "</arg_value>\n", js)(function)
        return f'{m("<tool_call>")} {_q(name + chr(10))} {inner} {m("</tool_call>")}'
    if fmt == "minimax-m2":
        inner = _xml(lambda p: f'<parameter name="{p}">', "</parameter>\n", js)(function)
        return (f'{m("<minimax:tool_call>")} {_q(chr(10) + f"<invoke name={_q(name)}>" + chr(10))} {inner} '
                f'"</invoke>\\n" {m("</minimax:tool_call>")}')
    if fmt == "deepseek-v3.2":
        inner = _xml(lambda p: f'<｜DSML｜parameter name="{p}" string="true">', "</｜DSML｜parameter>\n", js,
                     json_open=lambda p: f'<｜DSML｜parameter name="{p}" string="false">')(function)
        return (f'{m("<｜DSML｜function_calls>")} {_q(chr(10) + f"<｜DSML｜invoke name={_q(name)}>" + chr(10))} '
                f'{inner} "</｜DSML｜invoke>\\n" {m("</｜DSML｜function_calls>")}')
    if fmt == "hy3":
        inner = _xml(lambda p: f"<arg_key:opensource>{p}</arg_key:opensource>\n<arg_value:opensource>",
                     "</arg_value:opensource>\n", js)(function)
        head = _q(f"\n<tool_call:opensource>{name}<tool_sep:opensource>\n")
        return (f'{m("<tool_calls:opensource>")} {head} {inner} "</tool_call:opensource>\\n" '
                f'{m("</tool_calls:opensource>")}')
    if fmt == "kimi-k3":
        def typed(p: str) -> str:
            kind = dict(_required(function)).get(p, {}).get("type")
            return f'<|open|>argument key="{p}" type="{kind if isinstance(kind, str) else "object"}"<|sep|>'
        inner = _xml(lambda p: f'<|open|>argument key="{p}" type="string"<|sep|>', "<|close|>argument<|sep|>", js,
                     json_open=typed)(function)
        head = _q(f'<|open|>call tool="{name}" index="1"<|sep|>')
        return f'{m("<|open|>tools<|sep|>")} {head} {inner} "<|close|>call<|sep|>" {m("<|close|>tools<|sep|>")}'
    if fmt == "minimax-m3":  # every tag after the namespace token; a parameter is a tag of its own name
        ns = "]<]minimax[>["
        inner = _xml(lambda p: f"{ns}<{p}>", lambda p: f"{ns}</{p}>", js)(function)
        return (f'{m(ns)} {m("<tool_call>")} {_q(chr(10) + ns + f"<invoke name={_q(name)}>")} {inner} '
                f'{_q(ns + "</invoke>" + chr(10))} {m(ns)} {m("</tool_call>")}')
    if fmt == "minicpm5":
        inner = _xml(lambda p: f'<param name="{p}">', "</param>", js)(function)
        return f'{m("<function name=")} {_q(_q(name) + ">")} {inner} {m("</function>")}'
    if fmt == "gemma4":
        parts, quote = [], m('<|"|>')
        for i, (p, schema) in enumerate(_required(function)):
            key = _q(("," if i else "") + p + ":")
            value = f"{quote} {_TEXT} {quote}" if _is_string(schema) else js(schema)
            parts.append(f"{key} {value}")
        head, inner = _q("call:" + name + "{"), " ".join(parts) or '""'
        return f'{m("<|tool_call>")} {head} {inner} "}}" {m("<tool_call|>")}'
    if fmt == "kimi-k2":
        return (f'{m("<|tool_calls_section_begin|>")} {m("<|tool_call_begin|>")} {_q(f"functions.{name}:0")} '
                f'{m("<|tool_call_argument_begin|>")} {js(params)} {m("<|tool_call_end|>")} '
                f'{m("<|tool_calls_section_end|>")}')
    if fmt in ("deepseek-v3.1", "deepseek-r1"):
        head = f"function<｜tool▁sep｜>{name}\n```json\n" if fmt == "deepseek-r1" else f"{name}<｜tool▁sep｜>"
        tail = f' "\\n```" ' if fmt == "deepseek-r1" else " "
        return (f'{m("<｜tool▁calls▁begin｜>")} {m("<｜tool▁call▁begin｜>")} {_q(head)} {js(params)}{tail}'
                f'{m("<｜tool▁call▁end｜>")} {m("<｜tool▁calls▁end｜>")}')
    if fmt == "mistral":
        return f'{m("[TOOL_CALLS]")} {_q(name)} {m("[ARGS]")} {js(params)}'
    if fmt == "command-r7b":
        item = {"tool_call_id": {"type": "string", "pattern": "^[0-9]{1,3}$"}, "tool_name": {"const": name},
                "parameters": params}
        calls = array(item, ["tool_call_id", "tool_name", "parameters"])
        return f'{m("<|START_ACTION|>")} {calls} {m("<|END_ACTION|>")}'
    if fmt == "solar-open":
        return (f'{m("<|tool_calls|>")} {m("<|tool_call:begin|>")} /[0-9a-z]{{6}}/ {m("<|tool_call:name|>")} '
                f'{_q(name)} {m("<|tool_call:args|>")} {js(params)} {m("<|tool_call:end|>")} {m("<|calls|>")}')
    if fmt == "apertus":
        return f'{m("<|tools_prefix|>")} {array({name: params}, [name])} {m("<|tools_suffix|>")}'
    if fmt == "lfm2":
        args = [f'{_q(("," if i else "") + p + "=")} {js(s)}' for i, (p, s) in enumerate(_required(function))]
        head, inner = _q("[" + name + "("), " ".join(args) or '""'
        return f'{m("<|tool_call_start|>")} {head} {inner} ")]" {m("<|tool_call_end|>")}'
    if fmt == "functionary-v3.1":
        return f'{m("<function=")} {_q(name + ">")} {js(params)} {m("</function>")}'
    if fmt == "functionary-v3.2":
        return f'{m(">>>")} {_q(name + chr(10))} {js(params)}'
    if fmt == "gpt-oss":
        head = _q(" to=functions." + name + " ")
        return (f'{m("<|channel|>")} "commentary" {head} {m("<|constrain|>")} "json" {m("<|message|>")} '
                f'{js(params)} {m("<|call|>")}')
    if fmt == "llama3":
        return js({"type": "object", "properties": {**one, "parameters": params}, "required": ["name", "parameters"],
                   "additionalProperties": False})
    raise ValueError(f"no tool-call grammar for the format {fmt!r}")


def separator(fmt: str) -> str:
    """What goes between two forced calls (``parallel_tool_calls``)."""
    return '"; "' if fmt == "llama3" else '"\\n"'
