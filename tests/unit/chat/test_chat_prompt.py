"""Rendering chat requests: thinking switches, template kwargs, tools, assistant prefill, message validation."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from mlxd.engine.chat import (
    ChatOptions,
    ChatRequestError,
    ChatTemplate,
    apply_chat_template,
    parse_tool_choice,
    template_messages,
)

FIXTURES = Path(__file__).parent / "fixtures"
QWEN3 = ChatTemplate((FIXTURES / "qwen3.jinja").read_text(encoding="utf-8"), eos_token="<|im_end|>")
LLAMA3 = ChatTemplate((FIXTURES / "llama3.jinja").read_text(encoding="utf-8"), bos_token="<|begin_of_text|>",
                      eos_token="<|eot_id|>")
R1 = ChatTemplate((FIXTURES / "deepseek_r1.jinja").read_text(encoding="utf-8"), bos_token="<｜begin▁of▁sentence｜>")
CHATML = ChatTemplate("chatml")
HI = [{"role": "user", "content": "hi"}]
THINKING_OFF_TAIL = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def test_qwen3_default_thinks() -> None:
    prompt = apply_chat_template(QWEN3, HI)
    assert prompt.prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert prompt.enable_thinking and not prompt.starts_in_reasoning and not prompt.prefilled
    assert prompt.reasoning_format == "deepseek"


def test_reasoning_off_disables_thinking() -> None:
    prompt = apply_chat_template(QWEN3, HI, options=ChatOptions(reasoning="off"))
    assert prompt.prompt.endswith(THINKING_OFF_TAIL) and not prompt.enable_thinking


def test_reasoning_auto_follows_the_template() -> None:
    assert apply_chat_template(QWEN3, HI).enable_thinking
    assert not apply_chat_template(CHATML, HI).enable_thinking
    assert apply_chat_template(CHATML, HI, options=ChatOptions(reasoning="on")).enable_thinking


def test_request_kwargs_override_server_kwargs() -> None:
    server = ChatOptions(chat_template_kwargs={"enable_thinking": False})
    assert apply_chat_template(QWEN3, HI, options=server).prompt.endswith(THINKING_OFF_TAIL)
    prompt = apply_chat_template(QWEN3, HI, options=server, chat_template_kwargs={"enable_thinking": True})
    assert prompt.enable_thinking and not prompt.prompt.endswith(THINKING_OFF_TAIL)


def test_enable_thinking_as_string_is_refused() -> None:
    with pytest.raises(ChatRequestError, match='invalid type for "enable_thinking"'):
        apply_chat_template(QWEN3, HI, chat_template_kwargs={"enable_thinking": "false"})


def test_custom_kwargs_reach_the_template() -> None:
    template = ChatTemplate("{{ greeting }} {{ messages[0].content }}")
    options = ChatOptions(chat_template_kwargs={"greeting": "hello", "other": 1})
    assert apply_chat_template(template, HI, options=options).prompt == "hello hi"
    assert apply_chat_template(template, HI, options=options, chat_template_kwargs={"greeting": "yo"}).prompt == "yo hi"


def test_forced_open_think_starts_in_reasoning() -> None:
    prompt = apply_chat_template(R1, HI)
    assert prompt.prompt == "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>\n"
    assert prompt.starts_in_reasoning
    assert not apply_chat_template(R1, HI, add_generation_prompt=False).starts_in_reasoning


def test_tokenizer_bos_is_not_doubled() -> None:
    options = ChatOptions(tokenizer_adds_bos=True)
    assert apply_chat_template(R1, HI, options=options).prompt.startswith("<｜User｜>")


def test_tool_call_arguments_reach_templates_as_objects() -> None:
    messages = HI + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    llama = apply_chat_template(LLAMA3, messages, tools=WEATHER, now=datetime(2025, 3, 1)).prompt
    assert '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>' in llama
    assert "Today Date: 01 Mar 2025" in llama
    qwen = apply_chat_template(QWEN3, messages, tools=WEATHER)
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in qwen.prompt
    assert "<tool_response>\nsunny\n</tool_response>" in qwen.prompt
    assert qwen.parse_tool_calls


def test_tool_choice_none_renders_tools_but_parses_none() -> None:
    prompt = apply_chat_template(QWEN3, HI, tools=WEATHER, tool_choice="none")
    assert "get_weather" in prompt.prompt and not prompt.parse_tool_calls
    assert not apply_chat_template(QWEN3, HI).parse_tool_calls


def test_tool_choice_parsing() -> None:
    assert parse_tool_choice("required") == "required"
    assert parse_tool_choice({"type": "function", "function": {"name": "f"}}) == "auto"
    with pytest.raises(ChatRequestError, match="Invalid tool_choice: sometimes"):
        parse_tool_choice("sometimes")


def test_bad_tool_call_arguments_are_refused() -> None:
    messages = HI + [{"role": "assistant", "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": "{not json"}}]}]
    with pytest.raises(ChatRequestError, match="Failed to parse tool call arguments as JSON"):
        apply_chat_template(QWEN3, messages)


@pytest.mark.parametrize("tools", [{"type": "function"}, [{"type": "retrieval"}], [{"type": "function"}]])
def test_bad_tools_are_refused(tools: object) -> None:
    with pytest.raises(ChatRequestError, match="Failed to parse tools"):
        apply_chat_template(QWEN3, HI, tools=tools)


def test_content_parts_are_joined_and_developer_becomes_system() -> None:
    messages = [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
    ]
    assert template_messages(messages) == [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "one\ntwo"}]
    assert template_messages(messages, map_developer_to_system=False)[0]["role"] == "developer"


@pytest.mark.parametrize(("messages", "message"), [
    ("hi", "Expected 'messages' to be an array"),
    (["hi"], "Expected 'message' to be an object"),
    ([{"content": "x"}], "Missing 'role' in message"),
    ([{"role": "user"}], "All non-assistant messages must contain 'content'"),
    ([{"role": "assistant"}], "Assistant message must contain either 'content' or 'tool_calls'!"),
    ([{"role": "user", "content": 3}], "Expected 'content' to be a string or an array"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], "unsupported content"),
    ([{"role": "user", "content": [{"text": "x"}]}], "Missing content part type"),
    ([{"role": "assistant", "tool_calls": [{"function": {}}]}], "Missing tool call type"),
    ([{"role": "user", "content": "x", "name": 3}], "Expected 'name' to be a string"),
])
def test_bad_messages_are_refused(messages: object, message: str) -> None:
    with pytest.raises(ChatRequestError, match=message):
        apply_chat_template(CHATML, messages)


def test_prefill_continues_the_last_assistant_message() -> None:
    messages = HI + [{"role": "assistant", "content": [{"type": "text", "text": "The answer"},
                                                       {"type": "text", "text": " is"}]}]
    prompt = apply_chat_template(CHATML, messages)
    # Parts joined by a blank line, as llama-server joins a continued message's parts.
    assert prompt.prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nThe answer\n\n is"
    assert prompt.prefilled and prompt.reasoning_format == "none"


def test_no_prefill_closes_the_assistant_turn() -> None:
    messages = HI + [{"role": "assistant", "content": "Hello"}]
    prompt = apply_chat_template(CHATML, messages, options=ChatOptions(prefill_assistant=False))
    assert prompt.prompt.endswith("<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>assistant\n")
    assert not prompt.prefilled


def test_prefill_refuses_two_trailing_assistant_messages() -> None:
    messages = HI + [{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]
    with pytest.raises(ChatRequestError, match="Cannot have 2 or more assistant messages at the end of the list."):
        apply_chat_template(CHATML, messages)


# What llama-server b10622's /apply-template answered for Qwen3-0.6B's template and these final assistant messages.
QWEN3_CONTINUED = [
    ({"content": "Sure"}, "<think>\n\n</think>\n\nSure"),
    ({"content": "Sure", "reasoning_content": "Hmm"}, "<think>\nHmm\n</think>\n\nSure"),
    ({"content": "", "reasoning_content": "Hmm"}, "<think>\nHmm"),
    ({"content": [{"type": "text", "text": "Wh"}, {"type": "text", "text": "ill"}]},
     "<think>\n\n</think>\n\nWh\n\nill"),
]


@pytest.mark.parametrize(("last", "tail"), QWEN3_CONTINUED)
def test_continued_message_with_reasoning_as_llama_server(last: dict, tail: str) -> None:
    real = ChatTemplate((Path(__file__).parents[2] / "fixtures" / "templates" / "Qwen-Qwen3-0.6B.jinja")
                        .read_text(encoding="utf-8"))
    for options in (ChatOptions(), ChatOptions(reasoning="off")):
        prompt = apply_chat_template(real, HI + [{"role": "assistant", **last}], options=options)
        assert prompt.prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n" + tail
        assert prompt.starts_in_reasoning == tail.endswith("Hmm")


def test_continue_final_message_and_its_exclusions() -> None:
    messages = HI + [{"role": "assistant", "content": "Sure"}]
    closed = apply_chat_template(CHATML, messages, options=ChatOptions(prefill_assistant=False))
    assert not closed.prefilled
    for value in (True, "content"):
        continued = apply_chat_template(CHATML, messages, options=ChatOptions(prefill_assistant=False),
                                        continue_final_message=value, add_generation_prompt=False)
        assert continued.prefilled and continued.prompt.endswith("<|im_start|>assistant\nSure")
    with pytest.raises(ChatRequestError, match="Cannot set both add_generation_prompt and continue_final_message"):
        apply_chat_template(CHATML, messages, continue_final_message=True)


def test_prefill_inside_an_open_think_starts_in_reasoning() -> None:
    messages = HI + [{"role": "assistant", "content": "<think>\nLet me see"}]
    prompt = apply_chat_template(CHATML, messages)
    assert prompt.starts_in_reasoning
    closed = HI + [{"role": "assistant", "content": "<think>x</think>Answer:"}]
    assert not apply_chat_template(CHATML, closed).starts_in_reasoning


def test_reasoning_format_per_request_and_skip_chat_parsing() -> None:
    assert apply_chat_template(QWEN3, HI, reasoning_format="deepseek-legacy").reasoning_format == "deepseek-legacy"
    with pytest.raises(ChatRequestError, match="Unknown reasoning format: think"):
        apply_chat_template(QWEN3, HI, reasoning_format="think")
    skipped = apply_chat_template(QWEN3, HI, tools=WEATHER, options=ChatOptions(skip_chat_parsing=True))
    assert skipped.reasoning_format == "none" and not skipped.parse_tool_calls
