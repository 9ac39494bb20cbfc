"""From a chat request to a prompt: template kwargs, ``--reasoning``, assistant prefill, as llama-server does it."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, get_args

from mlxd.engine.chat.errors import ChatRequestError
from mlxd.engine.chat.messages import content_parts_text, template_messages, template_tools
from mlxd.engine.chat.tool_detect import detect_tool_format
from mlxd.engine.chat.reasoning import THINK_TAGS, ReasoningFormat, Tags, check_reasoning_format
from mlxd.engine.chat.templates import ChatTemplate
from mlxd.engine.chat.workarounds import reshape
from mlxd.engine.chat.tools import ToolCallFormat, tool_call_format

ReasoningMode = Literal["on", "off", "auto"]
ToolChoice = Literal["auto", "none", "required"]


@dataclass(frozen=True)
class ChatOptions:
    """The server-wide chat settings, from the configuration."""

    reasoning: ReasoningMode = "auto"  # --reasoning
    reasoning_format: ReasoningFormat = "deepseek"  # --reasoning-format (b10621's effective default)
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)  # --chat-template-kwargs, parsed
    prefill_assistant: bool = True  # --prefill-assistant / --no-prefill-assistant
    # The tokenizer adds BOS/EOS itself: a template that also writes them would double them, so they are cut.
    tokenizer_adds_bos: bool = False
    tokenizer_adds_eos: bool = False
    skip_chat_parsing: bool = False  # --skip-chat-parsing: everything the model says is content


@dataclass(frozen=True)
class ChatPrompt:
    """A rendered chat prompt and how the model's answer to it must be parsed."""

    prompt: str
    reasoning_format: ReasoningFormat
    enable_thinking: bool
    starts_in_reasoning: bool  # the prompt left a <think> open: generation begins inside reasoning
    parse_tool_calls: bool
    prefilled: bool  # the last assistant message was continued rather than closed
    tool_call_format: ToolCallFormat = "hermes"
    tools: tuple[dict[str, Any], ...] = ()  # the request's tools, which some formats read for argument types
    reasoning_tags: Tags = THINK_TAGS  # how this family opens and closes its reasoning


def parse_tool_choice(value: Any) -> ToolChoice:
    """``tool_choice`` as llama-server reads it: a non-string (an object naming a function) counts as auto."""
    if not isinstance(value, str):
        return "auto"
    if value not in get_args(ToolChoice):
        raise ChatRequestError(f"Invalid tool_choice: {value}")
    return value  # type: ignore[return-value]


def _enable_thinking(template: ChatTemplate, options: ChatOptions, kwargs: Mapping[str, Any]) -> bool:
    enabled = {"on": True, "off": False}.get(options.reasoning)
    if enabled is None:
        enabled = template.supports_thinking
    override = kwargs.get("enable_thinking")
    if isinstance(override, bool):
        return override
    if isinstance(override, str):
        raise ChatRequestError('invalid type for "enable_thinking" (expected boolean, got string)')
    return enabled


def _inside_reasoning(generation_prompt_end: str, prefill: str, tags: Tags) -> bool:
    """Whether text generated after this prompt starts inside a reasoning block (``<think>`` or the family's)."""
    think_open, think_close = tags
    inside = generation_prompt_end.rstrip().endswith(think_open)
    for tag in re.finditer(re.escape(think_open) + "|" + re.escape(think_close), prefill):
        inside = tag.group() == think_open
    return inside


def _check_builtin_request(template: ChatTemplate, tools: list[dict[str, Any]], tool_choice: Any) -> None:
    """A built-in format cannot describe tools: a request that offers them is refused, never served without them."""
    if template.jinja:
        where = (f"a Jinja chat template; --chat-template {template.builtin} is one of llama.cpp's built-in formats, "
                 "which cannot describe tools")
    else:
        where = "--jinja flag"
    if tools:
        raise ChatRequestError(f"tools param requires {where}")
    if tool_choice != "auto":
        raise ChatRequestError(f"tool_choice param requires {where}")


Continuation = Literal["auto", "content", "reasoning"]


def _continuation(value: Any) -> Continuation | None:
    """``continue_final_message`` as llama-server reads it: true, "content" or "reasoning_content"; else none."""
    if value is True:
        return "auto"
    names: dict[str, Continuation] = {"content": "content", "reasoning_content": "reasoning"}
    return names.get(value) if isinstance(value, str) else None


def _continued_text(message: Any, continuation: Continuation, tags: Tags | None) -> tuple[str, Continuation]:
    """The text that continues ``message``, and what it continues (its content or its reasoning)."""
    # Parts are joined as llama-server joins a continued message's parts, by a blank line.
    content = content_parts_text(message.get("content"), "\n\n")
    reasoning = message.get("reasoning_content") if isinstance(message.get("reasoning_content"), str) else ""
    if continuation == "auto":
        continuation = "reasoning" if reasoning and not content else "content"
    if tags is None:
        return (content if continuation == "content" else ""), continuation
    text = tags[0] + reasoning
    return (text + tags[1] + content if continuation == "content" else text), continuation


def apply_chat_template(
    template: ChatTemplate,
    messages: Any,
    *,
    options: ChatOptions = ChatOptions(),
    tools: Any = None,
    tool_choice: Any = "auto",
    add_generation_prompt: bool = True,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    reasoning_format: str | None = None,
    continue_final_message: Any = None,
    now: datetime | None = None,
) -> ChatPrompt:
    """Render an OpenAI-shaped chat request into a prompt.

    Request ``chat_template_kwargs`` override ``--chat-template-kwargs`` key by key; a boolean ``enable_thinking``
    among them overrides ``--reasoning``. A final assistant message is continued (the turn opened by the template
    and the message's text appended unclosed) when ``continue_final_message`` asks for it (true, or "content" /
    "reasoning_content", vLLM's spelling; ``add_generation_prompt`` must then be false), or by ``--prefill-assistant``
    (the default) whenever the conversation ends with one. A template with reasoning gets the message's reasoning
    in its tags first, closed unless the reasoning itself is what continues.
    """
    fmt = check_reasoning_format(reasoning_format) if reasoning_format is not None else options.reasoning_format
    choice = parse_tool_choice(tool_choice)
    tool_list = template_tools(tools)
    if template.builtin is not None:
        _check_builtin_request(template, tool_list, tool_choice)
        fmt = "none"  # a built-in format has no reasoning or tool-call parser: the answer is content, as upstream
    developer_is_system = "<|channel|>" not in template.source  # gpt-oss templates speak the developer role
    # Every message is validated, the one to prefill included, before any is set aside.
    chat = template_messages(messages, caps=template.caps, map_developer_to_system=developer_is_system)
    kwargs = {**options.chat_template_kwargs, **(chat_template_kwargs or {})}
    enable_thinking = _enable_thinking(template, options, kwargs)

    family = detect_tool_format(template.source)
    tags = family.think if family is not None else THINK_TAGS
    continuation = _continuation(continue_final_message)
    if continuation is None and options.prefill_assistant and chat and messages[-1]["role"] == "assistant":
        if len(messages) > 1 and messages[-2]["role"] == "assistant":
            raise ChatRequestError("Cannot have 2 or more assistant messages at the end of the list.")
        continuation, add_generation_prompt = "auto", False
    if continuation is not None and add_generation_prompt:
        raise ChatRequestError("Cannot set both add_generation_prompt and continue_final_message to true.")
    prefill = ""
    prefilled = continuation is not None and bool(chat)
    if prefilled and continuation is not None:
        markup = template.reasoning_markup(tags) if template.supports_thinking else None
        prefill, continuation = _continued_text(messages[-1], continuation, markup)
        if continuation == "content":
            fmt = "none"
        # The turn is opened by the template (its generation prompt) and the message's text follows, unclosed.
        add_generation_prompt = True
        chat = template_messages(messages[:-1], caps=template.caps, map_developer_to_system=developer_is_system)

    if template.builtin is None:
        chat = reshape(template.source, chat)
    context = {"enable_thinking": enable_thinking, **kwargs}
    prompt = template.render(chat, tools=tool_list, add_generation_prompt=add_generation_prompt, context=context,
                             now=now)
    if options.tokenizer_adds_bos and template.bos_token and prompt.startswith(template.bos_token):
        prompt = prompt[len(template.bos_token):]
    if options.tokenizer_adds_eos and template.eos_token and prompt.endswith(template.eos_token):
        prompt = prompt[: -len(template.eos_token)]

    if prefilled and template.supports_thinking:
        # The continuation writes its own reasoning opening: a generation prompt that already has one (DeepSeek R1,
        # or Qwen3's closed block with thinking off) is cut there, as llama-server cuts it.
        bare = template.render(chat, tools=tool_list, add_generation_prompt=False, context=context, now=now)
        common = len(os.path.commonprefix([bare, prompt]))
        opening = prompt.find(tags[0], common)
        if opening >= 0:
            prompt = prompt[:opening]
    skip = options.skip_chat_parsing
    return ChatPrompt(
        prompt=prompt + prefill,
        reasoning_format="none" if skip else fmt,
        enable_thinking=enable_thinking,
        starts_in_reasoning=add_generation_prompt and _inside_reasoning(prompt, prefill, tags),
        parse_tool_calls=not skip and bool(tool_list) and choice != "none",
        prefilled=prefilled,
        tool_call_format=tool_call_format(template.source),
        tools=tuple(tool_list),
        reasoning_tags=tags,
    )
