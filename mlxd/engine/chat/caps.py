"""What a chat template can express, found by rendering probe conversations (llama-server's template caps).

llama-server watches which inputs its Jinja runtime touches; jinja2 offers no such hook, so each probe plants a
marker and looks for it in the output. The caps decide how messages are shaped before rendering (typed or string
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


def _call(name: str, arguments: Any) -> dict[str, Any]:
    return {"id": f"call_{name}", "type": "function", "function": {"name": name, "arguments": arguments}}


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
    single = _try(render, conversation(_call(f"{_MARK}_first", {f"{_MARK}_arg": "value"})), [tool])
    parallel = _try(render, conversation(_call(f"{_MARK}_first", {"arg": "value"}),
                                         _call(f"{_MARK}_second", {"arg": "value"})), [tool])
    reasoning = _try(render, [user, {"role": "assistant", "content": "Answer",
                                     "reasoning_content": f"{_MARK}_reasoning"}, user])
    low = _try(render, [user], None, {"reasoning_effort": "low"})
    high = _try(render, [user], None, {"reasoning_effort": "high"})

    return TemplateCaps(
        # tojson writes an object's keys in double quotes; a template that prints the dict itself would not.
        supports_object_arguments=single is not None and f'"{_MARK}_arg"' in single,
        supports_parallel_tool_calls=parallel is not None and f"{_MARK}_second" in parallel,
        supports_preserve_reasoning=reasoning is not None and f"{_MARK}_reasoning" in reasoning,
        supports_reasoning_effort=low is not None and high is not None and low != high,
        supports_string_content=plain is not None,
        supports_system_role=system is not None and f"{_MARK}_system" in system,
        supports_tool_calls=single is not None and f"{_MARK}_first" in single,
        supports_tools=single is not None and f"{_MARK}_tool" in single,
        # A template that prints the parts list itself shows the marker inside a repr, which is not support.
        supports_typed_content=typed is not None and f"{_MARK}_typed" in typed and "'text'" not in typed,
    )
