"""What the chat-shaped routes share: media refusal, rendering the template, and parsing the model's answer.

OpenAI chat, Responses and Anthropic requests are all brought to OpenAI chat messages, rendered with the model's
template into a prompt, and answered by splitting the generated text into reasoning, content and tool calls.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from mlxd.api import constraints, media_parts, planning, reasoning
from mlxd.api.planning import Plan, config_value
from mlxd.api.prompts import encode
from mlxd.api.render.message import AssistantMessage, MessageDiff, ToolCallOut
from mlxd.api.state import ServingState
from mlxd.engine import ServedModel
from mlxd.engine import ChatTemplateError
from mlxd.engine import content_parts_text
from mlxd.engine import ChatOptions, ChatPrompt, apply_chat_template
from mlxd.engine import ChatDelta, ChatOutputStream
from mlxd.engine import ChatTemplate
from mlxd.errors import InvalidRequest, NotSupported


def _adds_bos(model: ServedModel) -> bool:
    tok = model.loaded.tokenizer
    bos = getattr(tok, "bos_token_id", None)
    if bos is None:
        return False
    ids = encode(tok, "a", True)
    return bool(ids) and ids[0] == bos


def chat_options(state: ServingState, model: ServedModel) -> ChatOptions:
    """The server-wide chat settings from the configuration."""
    kwargs: Any = config_value(state, "chat_template_kwargs", None) or {}
    if isinstance(kwargs, str):
        try:
            kwargs = json.loads(kwargs)
        except ValueError:
            kwargs = {}
    kwargs = dict(kwargs) if isinstance(kwargs, Mapping) else {}
    effort = str(config_value(state, "reasoning_effort", "default"))
    if effort != "default":  # --reasoning-effort reaches the template; --chat-template-kwargs may still name it
        kwargs.setdefault("reasoning_effort", effort)
    return ChatOptions(
        reasoning=str(config_value(state, "reasoning", "auto")),  # type: ignore[arg-type]
        reasoning_format=str(config_value(state, "reasoning_format", "deepseek")),  # type: ignore[arg-type]
        chat_template_kwargs=kwargs,
        prefill_assistant=bool(config_value(state, "prefill_assistant", True)),
        tokenizer_adds_bos=_adds_bos(model),
        skip_chat_parsing=bool(config_value(state, "skip_chat_parsing", False)),
    )


def template(model: ServedModel) -> ChatTemplate:
    if model.chat_template is None:
        raise NotSupported("this model has no chat template; use /completion with a prompt instead")
    return model.chat_template


def render(body: Mapping[str, Any], state: ServingState, model: ServedModel,
           messages: Any) -> tuple[ChatPrompt, list[int]]:
    """Render chat ``messages`` (OpenAI shape) with the request's tools and kwargs; the prompt and its tokens."""
    messages, sources = media_parts.extract(messages, model)  # media parts become markers (501 without a tower)
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise InvalidRequest("Field 'chat_template_kwargs': must be an object")
    reasoning_format = body.get("reasoning_format")
    if reasoning_format is not None and not isinstance(reasoning_format, str):
        raise InvalidRequest("Field 'reasoning_format': must be a string")
    options = chat_options(state, model)
    add_generation_prompt = body.get("add_generation_prompt", True)
    if not isinstance(add_generation_prompt, bool):
        raise InvalidRequest("Field 'add_generation_prompt': [json.exception.type_error.302] type must be boolean")
    try:
        prompt = apply_chat_template(
            template(model), messages, options=options, tools=body.get("tools"),
            tool_choice=body.get("tool_choice", "auto"), chat_template_kwargs=kwargs,
            reasoning_format=reasoning_format, add_generation_prompt=add_generation_prompt,
            continue_final_message=body.get("continue_final_message"),
        )
    except ChatTemplateError as exc:  # a request error here, whatever it is at load time
        raise InvalidRequest(exc.message) from exc
    parse_tools = body.get("parse_tool_calls")
    if parse_tools is not None and not isinstance(parse_tools, bool):
        raise InvalidRequest("Field 'parse_tool_calls': [json.exception.type_error.302] type must be boolean")
    if parse_tools is False:
        prompt = dataclasses.replace(prompt, parse_tool_calls=False)
    tokens = encode(model.loaded.tokenizer, prompt.prompt, True)
    if sources:  # the processor makes the tokens once the media are read (media_parts.resolve, in plan)
        tokens = media_parts.MediaPrompt(tokens, prompt.prompt, sources)
    return prompt, tokens


async def render_off_loop(request: Any, body: Mapping[str, Any], state: ServingState, model: ServedModel,
                          messages: Any) -> tuple[ChatPrompt, list[int]]:
    """``render`` on the offload pool when the request is large (a long conversation renders and tokenizes for a
    while)."""
    from mlxd.api import offload

    return await offload.run(render, body, state, model, messages, size=len(request.body or b""))


class ChatParser:
    """Generated text in, message diffs out (the engine's chat output parser, seen as the renderers need it)."""

    def __init__(self, prompt: ChatPrompt, *, streamed: bool = True) -> None:
        """``streamed``: calls are announced as they are written (False: each once whole, for a whole answer)."""
        self._stream = ChatOutputStream.for_prompt(prompt, stream_arguments=streamed)
        # What was parsed so far, as pieces: strings grown a delta at a time would copy all they hold at every
        # token (a long answer, or a tool call that writes a file as its argument).
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[tuple[str, str, list[str]]] = []  # id, name, argument pieces

    @property
    def message(self) -> AssistantMessage:
        """Everything parsed so far, as one message (whole once ``finish`` was called)."""
        return AssistantMessage("".join(self._content), "".join(self._reasoning),
                                [ToolCallOut(i, name, "".join(args)) for i, name, args in self._calls])

    @property
    def has_tool_calls(self) -> bool:
        return bool(self._calls)

    def feed(self, text: str) -> list[MessageDiff]:
        return self._diffs(self._stream.feed(text))

    def finish(self) -> list[MessageDiff]:
        return self._diffs(self._stream.finish())

    def _diffs(self, deltas: list[ChatDelta]) -> list[MessageDiff]:
        out: list[MessageDiff] = []
        for delta in deltas:
            if delta.reasoning_content:
                self._reasoning.append(delta.reasoning_content)
                out.append(MessageDiff(reasoning=delta.reasoning_content))
            if delta.content:
                self._content.append(delta.content)
                out.append(MessageDiff(content=delta.content))
            for call in delta.tool_calls:
                # As llama-server streams a call: its id and name with the arguments written so far, then pieces.
                if call.id:
                    self._calls.append((call.id, call.name, [call.arguments]))
                else:
                    self._calls[call.index][2].append(call.arguments)
                out.append(MessageDiff(tool_index=call.index, tool_id=call.id, tool_name=call.name,
                                       tool_arguments=call.arguments))
        return out


def parse_whole(prompt: ChatPrompt, text: str) -> AssistantMessage:
    """The message of a whole generated text."""
    parser = ChatParser(prompt, streamed=False)
    parser.feed(text)
    parser.finish()
    return parser.message


def echoed_prefill(echo: Any, messages: Any, prompt: ChatPrompt) -> str:
    """The text ``echo`` repeats: the final assistant message the prompt continued ("" when none or echo off)."""
    if echo is not None and not isinstance(echo, bool):
        raise InvalidRequest("Field 'echo': [json.exception.type_error.302] type must be boolean")
    if not echo or not prompt.prefilled:
        return ""
    content = messages[-1].get("content")
    return content_parts_text(content, "\n\n")  # the text the prompt continued, parts joined as there


def native_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """A chat-shaped body as native completion fields: OpenAI's ``logprobs``/``top_logprobs`` become ``n_probs``.

    ``response_format`` of type ``text`` asks for nothing and is dropped; any other kind stays and is refused.
    """
    fields = dict(body)
    logprobs = fields.pop("logprobs", None)
    top = fields.pop("top_logprobs", None)
    if logprobs is not None and not isinstance(logprobs, bool):
        raise InvalidRequest("Field 'logprobs': [json.exception.type_error.302] type must be boolean")
    if logprobs:
        if fields.get("tools") and fields.get("stream") is True:
            raise InvalidRequest("logprobs is not supported with tools + stream")
        if top is not None and (isinstance(top, bool) or not isinstance(top, int)):
            raise InvalidRequest("Field 'top_logprobs': [json.exception.type_error.302] type must be number")
        fields["n_probs"] = 20 if top is None else top
    elif top is not None:
        raise InvalidRequest("top_logprobs requires logprobs to be set to true")
    fmt = fields.get("response_format")
    if isinstance(fmt, Mapping) and fmt.get("type") == "text":
        fields.pop("response_format")
    return fields


async def plan(body_fields: dict[str, Any], state: ServingState, model: ServedModel, prompt: ChatPrompt,
               tokens: list[int]) -> Plan:
    """A chat request's plan: its native fields over the model's defaults, its constraints compiled and its
    reasoning budget read against the rendered prompt."""
    tokens = await media_parts.resolve(tokens, model, config_value(state, "media_path", None))
    p = planning.plan(body_fields, state, model, [tokens], cache_namespace="chat")
    close = prompt.reasoning_tags[1] if prompt.starts_in_reasoning else None
    p = await constraints.constrain(p, body_fields, state, model, chat=True, reasoning_close=close)
    p.reasoning = reasoning.chat_spec(body_fields, p.opts.reasoning, state, model, prompt)
    return p
