"""What a chat template can express, found by rendering probe conversations (llama-server's template caps).

llama-server watches which inputs its Jinja runtime touches; jinja2 offers no such hook, so each probe plants a
marker and looks for it in the output, and the tool-call arguments are a mapping that records whether its values
were read (``arguments.arg``, ``arguments|items``, ``arguments|tojson``), which is llama-server's test for a template
that takes arguments as an object. The caps decide how messages are shaped before rendering (typed or string
content, a merged system prompt, tool-call arguments as objects or strings) and are reported on ``/props``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mlxd.engine.chat.errors import ChatTemplateError

Render = Callable[[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]] | None, Mapping[str, Any]], str]

_MARK = "mlxd_probe_7f3a"


@dataclass(frozen=True)
class TemplateCaps:
    """``chat_template_caps`` as ``/props`` reports them."""

    supports_object_arguments: bool = False
    supports_parallel_tool_calls: bool = False
    supports_preserve_reasoning: bool = False
    supports_reasoning_effort: bool = False
    supports_string_content: bool = True
    supports_system_role: bool = True
    supports_tool_calls: bool = False
    supports_tools: bool = False
    supports_typed_content: bool = False

    def to_dict(self) -> dict[str, bool]:
        return asdict(self)


def _try(render: Render, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
         context: Mapping[str, Any] | None = None) -> str | None:
    try:
        return render(messages, tools, context or {})
    except ChatTemplateError:
        return None


class _WatchedArguments(dict[str, Any]):
    """Tool-call arguments that note when a template reads their values (deep copies share the note)."""

    def __init__(self, values: Mapping[str, Any], seen: list[bool]) -> None:
        super().__init__(values)
        self._seen = seen

    def _read(self) -> None:
        self._seen[0] = True

    def __getitem__(self, key: str) -> Any:
        self._read()
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self._read()
        return super().get(key, default)

    def items(self) -> Any:
        self._read()
        return super().items()

    def values(self) -> Any:
        self._read()
        return super().values()

    def __deepcopy__(self, memo: dict[int, Any]) -> _WatchedArguments:
        return _WatchedArguments(dict(self), self._seen)


def _call(name: str, arguments: Any, number: int = 1) -> dict[str, Any]:
    # Nine letters and digits, as llama-server's probe: Mistral's templates refuse any other id.
    return {"id": f"call{number:05d}", "type": "function", "function": {"name": name, "arguments": arguments}}


def detect_caps(render: Render) -> TemplateCaps:
    """Probe a template through ``render(messages, tools, context)``."""
    user = {"role": "user", "content": "User message"}
    plain = _try(render, [{"role": "user", "content": f"{_MARK}_string"}])
    typed = _try(render, [{"role": "user", "content": [{"type": "text", "text": f"{_MARK}_typed"}]}])
    system = _try(render, [{"role": "system", "content": f"{_MARK}_system"}, user])

    tool = {"type": "function", "function": {
        "name": f"{_MARK}_tool", "description": "Tool description",
        "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}, "required": ["arg"]}}}

    def conversation(*calls: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            user,
            {"role": "assistant", "content": "", "tool_calls": list(calls)},
            {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
            {"role": "assistant", "content": "The tool answered."},
            user,
        ]

    # One call first: templates that refuse parallel calls (Llama 3.1 raises) still take tool calls.
    seen = [False]
    watched = _WatchedArguments({f"{_MARK}_arg": "value"}, seen)
    single = _try(render, conversation(_call(f"{_MARK}_first", watched)), [tool])
    parallel = _try(render, conversation(_call(f"{_MARK}_first", {"arg": "value"}),
                                         _call(f"{_MARK}_second", {"arg": "value"}, 2)), [tool])
    reasoning = _try(render, [user, {"role": "assistant", "content": "Answer",
                                     "reasoning_content": f"{_MARK}_reasoning"}, user])
    low = _try(render, [user], None, {"reasoning_effort": "low"})
    high = _try(render, [user], None, {"reasoning_effort": "high"})

    # A template that reads parts may still run on a string (iterating its characters) without printing it: as
    # llama-server, string content counts as supported only if the string reaches the output.
    typed_ok = typed is not None and f"{_MARK}_typed" in typed and "'text'" not in typed
    string_ok = plain is not None and (f"{_MARK}_string" in plain or not typed_ok)
    return TemplateCaps(
        supports_object_arguments=single is not None and seen[0],
        supports_parallel_tool_calls=parallel is not None and f"{_MARK}_second" in parallel,
        supports_preserve_reasoning=reasoning is not None and f"{_MARK}_reasoning" in reasoning,
        supports_reasoning_effort=low is not None and high is not None and low != high,
        supports_string_content=string_ok,
        supports_system_role=system is not None and f"{_MARK}_system" in system,
        supports_tool_calls=single is not None and f"{_MARK}_first" in single,
        supports_tools=single is not None and f"{_MARK}_tool" in single,
        # A template that prints the parts list itself shows the marker inside a repr, which is not support.
        supports_typed_content=typed_ok,
    )
