"""Each model family's tool-call format: how its template is recognised, and how a call region is read.

A format is the marker that opens a region of calls, the one that closes it (empty: the region runs to the next
opening marker or the end of the answer, as Mistral's ``[TOOL_CALLS]``), and a reader of the region's text. A reader
returns the region's ``(name, arguments_json)`` calls, or raises ``ValueError`` when the text is not well-formed
calls; the region then stays content, verbatim. mlx-lm's readers (``mlx_lm/tool_parsers``) are used where one
reads the format; the others are written here, each a few lines.

The format is detected from the template's text (engine.chat.tool_detect).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mlx_lm.tool_parsers import gemma4, glm47, kimi_k2, kimi_k3, minicpm5, minimax_m2, pythonic, qwen3_coder

from mlxd.engine.chat import partial_calls as pc
from mlxd.engine.chat import partial_keywords as pk
from mlxd.engine.chat.call_deltas import CallView
from mlxd.engine.chat.partial_calls import Partial
from mlxd.engine.chat.reasoning import WHITESPACE

Call = tuple[str, str]  # (name, arguments as JSON text)
Tools = Sequence[Mapping[str, Any]]
Reader = Callable[[str, Tools], list[Call]]


def _dump(arguments: Any) -> str:
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _json(text: str) -> Any:
    return _DECODER.decode(text.strip(WHITESPACE))


def _call(name: Any, arguments: Any) -> Call:
    if not isinstance(name, str) or not name:
        raise ValueError("a tool call needs a function name")
    if isinstance(arguments, str):  # written already encoded: kept as written, if it is a JSON object
        if not isinstance(_json(arguments), Mapping):
            raise ValueError("tool-call arguments must be a JSON object")
        return name, arguments
    if not isinstance(arguments, Mapping):
        raise ValueError("tool-call arguments must be a JSON object")
    return name, _dump(arguments)


def _mlx(reader: Callable[..., Any]) -> Reader:
    """An mlx-lm reader (a dict or a list of dicts with ``name`` and ``arguments``) as a format reader."""
    def read(text: str, tools: Tools) -> list[Call]:
        try:
            found = reader(text, list(tools) or None)
        except ValueError:
            raise
        except Exception as exc:  # noqa: BLE001 - their readers raise what the text makes them raise
            raise ValueError(f"not a tool call: {type(exc).__name__}: {exc}") from exc
        found = found if isinstance(found, list) else [found]
        if not found:
            raise ValueError("no tool call")
        return [_call(c.get("name"), c.get("arguments", {})) for c in found]
    return read


def _hermes(text: str, tools: Tools) -> list[Call]:
    obj = _json(text)
    if not isinstance(obj, Mapping):
        raise ValueError("not a call object")
    return [_call(obj.get("name"), obj["arguments"] if "arguments" in obj else obj.get("parameters", {}))]


def _json_list(name_key: str, arguments_key: str) -> Reader:
    """A JSON array of ``{name_key: ..., arguments_key: {...}}`` (Granite, Nemotron v2, Mistral v3, Command R7B)."""
    def read(text: str, tools: Tools) -> list[Call]:
        items = _json(text)
        if not isinstance(items, list) or not items:
            raise ValueError("not a list of calls")
        return [_call(i.get(name_key), i.get(arguments_key, {})) if isinstance(i, Mapping) else _call(None, None)
                for i in items]
    return read


_MISTRAL_HEADER = re.compile(r"\s*([\w.-]+)\s*(?:\[CALL_ID\]\s*\w+\s*)?\[ARGS\]")


def _mistral(text: str, tools: Tools) -> list[Call]:
    """``[{"name": ..., "arguments": ...}]`` (v3, Nemo), or ``name[ARGS]{...}`` with an optional ``[CALL_ID]``."""
    if text.lstrip(WHITESPACE).startswith("["):
        return _json_list("name", "arguments")(text, tools)
    match = _MISTRAL_HEADER.match(text)
    if match is None:
        raise ValueError("not a Mistral call")
    arguments, end = _DECODER.raw_decode(text, match.end())
    if text[end:].strip(WHITESPACE):
        raise ValueError("text after the call's arguments")
    return [_call(match.group(1), arguments)]


def _apertus(text: str, tools: Tools) -> list[Call]:
    """``[{"name": {...arguments}}]``."""
    items = _json(text)
    if not isinstance(items, list) or not items:
        raise ValueError("not a list of calls")
    calls = []
    for item in items:
        if not isinstance(item, Mapping) or len(item) != 1:
            raise ValueError("each call is one {name: arguments} pair")
        ((name, arguments),) = item.items()
        calls.append(_call(name, arguments))
    return calls


def _header_json(pattern: str) -> Reader:
    """A header naming the function (``pattern``'s group 1) followed by the JSON arguments, nothing after."""
    header = re.compile(pattern, re.S)

    def read(text: str, tools: Tools) -> list[Call]:
        match = header.match(text)
        if match is None:
            raise ValueError("not a call header")
        body = text[match.end():]
        if "```" in pattern:  # DeepSeek R1 fences the arguments
            fence = body.rfind("```")
            if fence < 0:
                raise ValueError("unclosed code fence")
            body = body[:fence]
        return [_call(match.group(1), _json(body))]
    return read


def _between(begin: str, end: str, call: Reader) -> Reader:
    """Calls each between ``begin`` and ``end`` inside the region, nothing else (DeepSeek, Solar Open)."""
    each = re.compile(re.escape(begin) + "(.*?)" + re.escape(end), re.S)

    def read(text: str, tools: Tools) -> list[Call]:
        calls, rest = [], each.sub("", text)
        if rest.strip(WHITESPACE):
            raise ValueError("text between calls")
        for match in each.finditer(text):
            calls += call(match.group(1), tools)
        if not calls:
            raise ValueError("no call")
        return calls
    return read


_DSML_INVOKE = re.compile(r'\s*<｜DSML｜invoke name="([^"]+)">(.*?)</｜DSML｜invoke>', re.S)
_DSML_PARAM = re.compile(r'\s*<｜DSML｜parameter name="([^"]+)" string="(true|false)">(.*?)</｜DSML｜parameter>', re.S)


def _deepseek_dsml(text: str, tools: Tools) -> list[Call]:
    """DeepSeek V3.2's ``<｜DSML｜invoke name=...>`` blocks of ``<｜DSML｜parameter ... string=...>`` values."""
    calls, pos = [], 0
    while (invoke := _DSML_INVOKE.match(text, pos)) is not None:
        arguments, at, body = {}, 0, invoke.group(2)
        while (param := _DSML_PARAM.match(body, at)) is not None:
            value = param.group(3)
            arguments[param.group(1)] = value if param.group(2) == "true" else _json(value)
            at = param.end()
        if body[at:].strip(WHITESPACE):
            raise ValueError("text inside an invoke block")
        calls.append(_call(invoke.group(1), arguments))
        pos = invoke.end()
    if not calls or text[pos:].strip(WHITESPACE):
        raise ValueError("not DSML calls")
    return calls


def _deepseek(call: Reader) -> Reader:
    return _between("<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", call)


def _json_sequence(text: str, tools: Tools) -> list[Call]:
    """A JSON array of ``{"name", "arguments"}`` objects (Apriel), or such objects one per line (MiniMax M1)."""
    if text.lstrip(WHITESPACE).startswith("["):
        return _json_list("name", "arguments")(text, tools)
    calls, pos = [], 0
    while (pos := len(text) - len(text[pos:].lstrip(WHITESPACE))) < len(text):
        obj, pos = _DECODER.raw_decode(text, pos)
        calls += _hermes(_dump(obj), tools)
    if not calls:
        raise ValueError("no call")
    return calls


def _params(syntax: pc.ParamSyntax) -> Reader:
    """A region of calls written parameter by parameter (Hy3): each closed, nothing after them."""
    def read(text: str, tools: Tools) -> list[Call]:
        calls, end = pc.params_scan(syntax, text, tools)
        if not calls or end is None or text[end:].strip(WHITESPACE):
            raise ValueError("not calls")
        return [_call(name, _json(arguments or "")) for name, arguments in calls]
    return read


def _qwen3_coder(text: str, tools: Tools) -> list[Call]:
    """Qwen3-Coder's ``<function=NAME><parameter=P>value</parameter></function>`` (also Seed-OSS's body)."""
    body = text.strip(WHITESPACE)
    if not (body.startswith("<function=") and body.endswith("</function>")):
        raise ValueError("not a <function=...> block")
    return _mlx(qwen3_coder.parse_tool_call)(body, tools)


def _harmony(text: str, tools: Tools) -> list[Call]:
    raise ValueError("gpt-oss answers are read whole by engine.chat.harmony, not by call regions")


def _functionary_v32(text: str, tools: Tools) -> list[Call]:
    """``NAME\\n{...}`` after ``>>>`` (``all`` is Functionary's name for plain content, never a call)."""
    name, _, body = text.partition("\n")
    if name.strip(WHITESPACE) == "all":
        raise ValueError("content, not a call")
    return [_call(name.strip(WHITESPACE), _json(body))]


@dataclass(frozen=True)
class ToolFormat:
    """How one family writes tool calls."""

    name: str
    start: str
    end: str  # "" : the region runs to the next ``start`` or to the end of the answer
    read: Reader
    # The reasoning block this family writes, when not <think>...</think>.
    think: tuple[str, str] = ("<think>", "</think>")
    # The calls of an open region as far as they are written (engine.chat.partial_calls); None: a call is shown
    # once its region is complete.
    partial: Partial | None = None
    # The ids the model wrote for a region's calls, in order (Kimi K2's ``functions.NAME:0``, which llama-server
    # returns as the call's id); None: mlxd makes them.
    ids: Callable[[str], list[str]] | None = None
    # Markup around the answer's text that is not content (Kimi K3's response section), dropped from it.
    content_markup: tuple[str, ...] = ()

    def calls(self, region: str, tools: Tools = ()) -> list[Call] | None:
        """The calls in one region's text (between the markers), or None when it is not well-formed calls.

        Arguments are the model's own JSON text where it wrote JSON (as llama-server returns them), so that the
        pieces streamed from :meth:`view` add up to them."""
        try:
            calls = self.read(region, tools)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError):
            return None
        if not calls:
            return None
        written = self.view(region, tools)
        if len(written) == len(calls):
            calls = [(name, _same_or(arguments, view)) if view_name == name else (name, arguments)
                     for (name, arguments), (view_name, view) in zip(calls, written)]
        return calls

    def view(self, region: str, tools: Tools = ()) -> list[CallView]:
        """The calls of a region (open or not) as far as they are written; [] when nothing can be shown yet."""
        if self.partial is None:
            return []
        try:
            return self.partial(region, tools)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError):
            return []


def _same_or(arguments: str, written: str | None) -> str:
    """The written arguments when they are the same JSON as the reader's, else the reader's."""
    if written is None or written == arguments:
        return arguments
    try:
        return written if json.loads(written) == json.loads(arguments) else arguments
    except ValueError:
        return arguments


_MISTRAL_PARTIAL = pc.header_partial(_MISTRAL_HEADER.pattern)
_JSON_LIST = pc.list_partial("name", "arguments")


def _mistral_view(text: str, tools: Tools) -> list[CallView]:
    return (_JSON_LIST if text.lstrip(WHITESPACE).startswith("[") else _MISTRAL_PARTIAL)(text, tools)


def _functionary_v32_view(text: str, tools: Tools) -> list[CallView]:
    return [c for c in pc.header_partial(r"([^\n]+)\n")(text, tools) if c[0] != "all"]


def _deepseek_view(header: str) -> Partial:
    return pc.split_partial("<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", pc.header_partial(header))


_KIMI_IDS = re.compile(r"<\|tool_call_begin\|>\s*((?:functions\.)?[^<]+?:\d+)\s*<\|tool_call_argument_begin\|>")
_SOLAR_HEADER = r"[^<]*<\|tool_call:name\|>\s*([^<]+?)\s*<\|tool_call:args\|>"
_R1_HEADER = r"\s*function<｜tool▁sep｜>([^\n]+)\n```json\n"
_V31_HEADER = r"\s*([^<｜]+?)<｜tool▁sep｜>"

HERMES = ToolFormat("hermes", "<tool_call>", "</tool_call>", _hermes,
                    partial=pc.object_partial("name", "arguments", "parameters"))
FORMATS: dict[str, ToolFormat] = {f.name: f for f in (
    HERMES,
    ToolFormat("qwen3-coder", "<tool_call>", "</tool_call>", _qwen3_coder, partial=pc.params_partial(pc.QWEN3_CODER)),
    # name[ARGS]{...} (Devstral, Ministral 3, Small 3.2); [{"name": ..., "arguments": ...}] (Nemo, v3)
    ToolFormat("mistral", "[TOOL_CALLS]", "", _mistral, partial=_mistral_view),
    ToolFormat("mistral-v3", "[TOOL_CALLS]", "", _mistral, partial=_mistral_view),
    ToolFormat("deepseek-r1", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", _deepseek(_header_json(_R1_HEADER)),
               partial=_deepseek_view(_R1_HEADER)),
    ToolFormat("deepseek-v3.1", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", _deepseek(_header_json(_V31_HEADER)),
               partial=_deepseek_view(_V31_HEADER)),
    ToolFormat("deepseek-v3.2", "<｜DSML｜function_calls>", "</｜DSML｜function_calls>", _deepseek_dsml,
               partial=pc.params_partial(pc.DSML)),
    ToolFormat("glm", "<tool_call>", "</tool_call>", _mlx(glm47.parse_tool_call), partial=pc.params_partial(pc.GLM)),
    ToolFormat("kimi-k2", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
               _mlx(kimi_k2.parse_tool_call), ids=_KIMI_IDS.findall, partial=pc.split_partial(
                   "<|tool_call_begin|>", "<|tool_call_end|>",
                   pc.header_partial(r"\s*(?:functions\.)?(.+?):\d+\s*<\|tool_call_argument_begin\|>"))),
    ToolFormat("minimax-m2", "<minimax:tool_call>", "</minimax:tool_call>", _mlx(minimax_m2.parse_tool_call),
               partial=pc.params_partial(pc.MINIMAX_M2)),
    ToolFormat("seed-oss", "<seed:tool_call>", "</seed:tool_call>", _qwen3_coder,
               think=("<seed:think>", "</seed:think>"), partial=pc.params_partial(pc.QWEN3_CODER)),
    ToolFormat("command-r7b", "<|START_ACTION|>", "<|END_ACTION|>", _json_list("tool_name", "parameters"),
               think=("<|START_THINKING|>", "<|END_THINKING|>"), partial=pc.list_partial("tool_name", "parameters")),
    ToolFormat("granite", "<|tool_call|>", "", _json_list("name", "arguments"), partial=_JSON_LIST),
    ToolFormat("nemotron-v2", "<TOOLCALL>", "</TOOLCALL>", _json_list("name", "arguments"), partial=_JSON_LIST),
    ToolFormat("apertus", "<|tools_prefix|>", "<|tools_suffix|>", _apertus, partial=pc.apertus_partial),
    ToolFormat("lfm2", "<|tool_call_start|>", "<|tool_call_end|>", _mlx(pythonic.parse_tool_call),
               partial=pk.keyword_partial(pk.LFM2)),
    ToolFormat("gemma4", "<|tool_call>", "<tool_call|>", _mlx(gemma4.parse_tool_call),
               partial=pk.keyword_partial(pk.GEMMA4)),
    ToolFormat("functionary-v3.1", "<function=", "</function>", _header_json(r"([\w.-]+)>"),
               partial=pc.header_partial(r"([\w.-]+)>")),
    ToolFormat("functionary-v3.2", ">>>", "", _functionary_v32, partial=_functionary_v32_view),
    ToolFormat("minimax-m1", "<tool_calls>", "</tool_calls>", _json_sequence,
               partial=pc.sequence_partial("name", "arguments")),
    ToolFormat("apriel", "<tool_calls>", "</tool_calls>", _json_sequence,
               partial=pc.sequence_partial("name", "arguments")),
    ToolFormat("solar-open", "<|tool_calls|>", "<|calls|>",
               _between("<|tool_call:begin|>", "<|tool_call:end|>", _header_json(_SOLAR_HEADER)),
               partial=pc.split_partial("<|tool_call:begin|>", "<|tool_call:end|>", pc.header_partial(_SOLAR_HEADER))),
    ToolFormat("hy3", "<tool_calls:opensource>", "</tool_calls:opensource>", _params(pc.HY3),
               think=("<think:opensource>", "</think:opensource>"), partial=pc.params_partial(pc.HY3)),
    ToolFormat("minicpm5", "<function name=", "</function>", _mlx(minicpm5.parse_tool_call),
               partial=pc.params_partial(pc.MINICPM5)),
    ToolFormat("kimi-k3", "<|open|>tools<|sep|>", "<|close|>tools<|sep|>", _mlx(kimi_k3.parse_tool_call),
               think=("<|open|>think<|sep|>", "<|close|>think<|sep|>"), partial=pc.params_partial(pc.KIMI_K3),
               content_markup=("<|open|>response<|sep|>", "<|close|>response<|sep|>", "<|close|>message<|sep|>",
                               "<|end_of_msg|>")),
    ToolFormat("minimax-m3", "]<]minimax[>[<tool_call>", "]<]minimax[>[</tool_call>", _params(pc.MINIMAX_M3),
               think=("<mm:think>", "</mm:think>"), partial=pc.params_partial(pc.MINIMAX_M3)),
    # gpt-oss writes channels, not call regions (engine.chat.harmony); the markers are its call's header.
    ToolFormat("gpt-oss", " to=functions.", "<|call|>", _harmony),
)}
