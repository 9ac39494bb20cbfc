"""Chat templating and the parsing of chat answers (reasoning, tool calls), with llama-server's semantics.

Typical use, on the asyncio side of a chat route::

    template = load_chat_template(model_dir, chat_template=cfg_template, chat_template_file=cfg_file)
    prompt = apply_chat_template(template, body["messages"], options=options, tools=body.get("tools"), ...)
    stream = ChatOutputStream.for_prompt(prompt)
    for event in token_events: deltas = stream.feed(event.text)
    deltas = stream.finish(); message = stream.message()

On the worker side, ``ReasoningBudget`` watches generated token texts for ``--reasoning-budget``.
"""

from mlxd.engine.chat.budget import ReasoningBudget
from mlxd.engine.chat.caps import TemplateCaps
from mlxd.engine.chat.errors import ChatRequestError, ChatTemplateError
from mlxd.engine.chat.llama_tools import LlamaToolCallStream, extract_llama_tool_calls
from mlxd.engine.chat.messages import template_messages, template_tools
from mlxd.engine.chat.output import ChatDelta, ChatMessage, ChatOutputStream, parse_chat_output
from mlxd.engine.chat.prompt import ChatOptions, ChatPrompt, ReasoningMode, apply_chat_template, parse_tool_choice
from mlxd.engine.chat.reasoning import (
    THINK_CLOSE,
    THINK_OPEN,
    ReasoningFormat,
    ReasoningStream,
    check_reasoning_format,
    split_reasoning,
)
from mlxd.engine.chat.templates import (
    BUILTIN_TEMPLATES,
    UPSTREAM_TEMPLATE_NAMES,
    ChatTemplate,
    load_chat_template,
    resolve_template,
)
from mlxd.engine.chat.tools import (
    ToolCall,
    ToolCallDelta,
    ToolCallFormat,
    ToolCallStream,
    extract_tool_calls,
    new_tool_call_id,
    tool_call_format,
)

__all__ = [
    "BUILTIN_TEMPLATES",
    "THINK_CLOSE",
    "THINK_OPEN",
    "UPSTREAM_TEMPLATE_NAMES",
    "ChatDelta",
    "ChatMessage",
    "ChatOptions",
    "ChatOutputStream",
    "ChatPrompt",
    "ChatRequestError",
    "ChatTemplate",
    "ChatTemplateError",
    "LlamaToolCallStream",
    "ReasoningBudget",
    "ReasoningFormat",
    "ReasoningMode",
    "ReasoningStream",
    "TemplateCaps",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallFormat",
    "ToolCallStream",
    "apply_chat_template",
    "check_reasoning_format",
    "extract_llama_tool_calls",
    "extract_tool_calls",
    "load_chat_template",
    "new_tool_call_id",
    "parse_chat_output",
    "parse_tool_choice",
    "resolve_template",
    "split_reasoning",
    "template_messages",
    "template_tools",
    "tool_call_format",
]
