"""A model's chat answer, parsed: reasoning first, then tool calls in what remains, whole or as it streams."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlxd.engine.chat.prompt import ChatPrompt
from mlxd.engine.chat.reasoning import THINK_TAGS, ReasoningFormat, ReasoningStream, Tags, partial_tag_suffix
from mlxd.engine.chat.llama_tools import LlamaToolCallStream
from mlxd.engine.chat.tools import ToolCall, ToolCallDelta, ToolCallFormat, ToolCallStream, format_named, new_tool_call_id
from mlxd.engine.chat.formats import FORMATS, Tools
from mlxd.engine.chat.harmony import HarmonyStream


@dataclass(frozen=True)
class ChatMessage:
    """The parsed answer: what becomes ``message.content``, ``reasoning_content`` and ``tool_calls``."""

    content: str
    reasoning_content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class ChatDelta:
    """One streamed change, in the order the text produced it."""

    reasoning_content: str = ""
    content: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = field(default=())

    def to_openai(self) -> dict[str, Any]:
        """The ``delta`` object of an OpenAI streaming chunk (without ``role``)."""
        delta: dict[str, Any] = {}
        if self.reasoning_content:
            delta["reasoning_content"] = self.reasoning_content
        if self.content:
            delta["content"] = self.content
        if self.tool_calls:
            delta["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        return delta


def parse_chat_output(text: str, **options: Any) -> ChatMessage:
    """Parse a whole generated answer; ``options`` are :class:`ChatOutputStream`'s (``tools``: the request's, which
    some formats read for argument types). Each call is read once whole, as a non-streamed response shows it."""
    stream = ChatOutputStream(**options, stream_arguments=False)
    stream.feed(text)
    stream.finish()
    return stream.message()


class _Unmarked:
    """Content less a family's markup around it (Kimi K3's response section), a marker held while half written."""

    def __init__(self, markup: tuple[str, ...]) -> None:
        self._markup = markup
        self._held = ""

    def feed(self, text: str, final: bool) -> str:
        if not self._markup:
            return text
        text = self._held + text
        for marker in self._markup:
            text = text.replace(marker, "")
        hold = 0 if final else max(partial_tag_suffix(text, m) for m in self._markup)
        self._held = text[len(text) - hold:] if hold else ""
        return text[:len(text) - hold]


class ChatOutputStream:
    """Feed generated text deltas; get :class:`ChatDelta` lists back, and the whole message at the end."""

    def __init__(
        self,
        *,
        reasoning_format: ReasoningFormat = "deepseek",
        starts_in_reasoning: bool = False,
        parse_tool_calls: bool = False,
        tool_call_format: ToolCallFormat = "hermes",
        tools: Tools = (),
        reasoning_tags: Tags = THINK_TAGS,
        id_factory: Callable[[], str] = new_tool_call_id,
        stream_arguments: bool = True,
    ) -> None:
        """``stream_arguments``: announce calls as they are written (False: each once whole, for a whole text)."""
        self._reasoning = ReasoningStream(reasoning_format, starts_in_reasoning=starts_in_reasoning,
                                          tags=reasoning_tags)
        # gpt-oss's channels carry reasoning, content and calls at once: one reader for all three.
        self._harmony = (HarmonyStream(parse_tool_calls=parse_tool_calls, id_factory=id_factory,
                                       stream_arguments=stream_arguments)
                         if tool_call_format == "gpt-oss" and reasoning_format != "none" else None)
        self._tools: ToolCallStream | LlamaToolCallStream | None = None
        if self._harmony is not None:
            pass
        elif parse_tool_calls and tool_call_format == "llama3":
            self._tools = LlamaToolCallStream(id_factory=id_factory, stream_arguments=stream_arguments)
        elif parse_tool_calls:
            self._tools = ToolCallStream(fmt=format_named(tool_call_format), tools=tools, id_factory=id_factory,
                                         stream_arguments=stream_arguments)
        self._unmarked = _Unmarked(FORMATS[tool_call_format].content_markup if tool_call_format in FORMATS else ())
        self._content: list[str] = []
        self._reasoning_text: list[str] = []
        self._calls: list[tuple[str, str, list[str]]] = []  # (id, name, argument pieces) by index

    @classmethod
    def for_prompt(cls, prompt: ChatPrompt, *, id_factory: Callable[[], str] = new_tool_call_id,
                   stream_arguments: bool = True) -> ChatOutputStream:
        """The parser for answers to a rendered prompt."""
        return cls(
            stream_arguments=stream_arguments,
            reasoning_format=prompt.reasoning_format,
            starts_in_reasoning=prompt.starts_in_reasoning,
            parse_tool_calls=prompt.parse_tool_calls,
            tool_call_format=prompt.tool_call_format,
            tools=prompt.tools,
            reasoning_tags=prompt.reasoning_tags,
            id_factory=id_factory,
        )

    @property
    def in_reasoning(self) -> bool:
        """Whether the text so far ends inside a reasoning block (what ``--reasoning-budget`` counts)."""
        if self._harmony is not None:
            return self._harmony.in_reasoning
        return self._reasoning.in_reasoning

    def feed(self, text: str) -> list[ChatDelta]:
        """Consume one delta of generated text."""
        if self._harmony is not None:
            return self._emit(*self._harmony.feed(text))
        return self._deltas(*self._reasoning.feed(text), final=False)

    def finish(self) -> list[ChatDelta]:
        """The end of generation: release everything held back."""
        if self._harmony is not None:
            return self._emit(*self._harmony.finish())
        return self._deltas(*self._reasoning.finish(), final=True)

    def message(self) -> ChatMessage:
        """Everything emitted so far, as one message (complete once :meth:`finish` was called)."""
        return ChatMessage(
            content="".join(self._content),
            reasoning_content="".join(self._reasoning_text),
            tool_calls=tuple(ToolCall(id=i, name=n, arguments_json="".join(a)) for i, n, a in self._calls),
        )

    def _deltas(self, reasoning: str, content: str, *, final: bool) -> list[ChatDelta]:
        calls: list[ToolCallDelta] = []
        if self._tools is not None:
            content, calls = self._tools.feed(content)
            if final:
                more, more_calls = self._tools.finish()
                content, calls = content + more, calls + more_calls
        return self._emit(reasoning, self._unmarked.feed(content, final), calls)

    def _emit(self, reasoning: str, content: str, calls: list[ToolCallDelta]) -> list[ChatDelta]:
        """Record and return one step's reasoning, content and call deltas, in that order."""
        out: list[ChatDelta] = []
        if reasoning:
            self._reasoning_text.append(reasoning)
            out.append(ChatDelta(reasoning_content=reasoning))
        if content:
            self._content.append(content)
            out.append(ChatDelta(content=content))
        for call in calls:
            if call.id:  # a call's first delta; the others add to its arguments
                self._calls.append((call.id, call.name, [call.arguments]))
            else:
                self._calls[call.index][2].append(call.arguments)
            out.append(ChatDelta(tool_calls=(call,)))
        return out
