"""Template caps found by probing, and the message shaping they drive."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.engine.chat import ChatRequestError, ChatTemplate, apply_chat_template, template_messages

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str) -> ChatTemplate:
    return ChatTemplate((FIXTURES / name).read_text(encoding="utf-8"), bos_token="<bos>")


def test_qwen3_caps() -> None:
    assert load("qwen3.jinja").caps.to_dict() == {
        "supports_object_arguments": True,
        "supports_parallel_tool_calls": True,
        "supports_preserve_reasoning": False,  # Qwen3 drops reasoning before the last user query
        "supports_reasoning_effort": False,
        "supports_string_content": True,
        "supports_system_role": True,
        "supports_tool_calls": True,
        "supports_tools": True,
        "supports_typed_content": False,
    }


def test_llama3_takes_one_call_at_a_time() -> None:
    caps = load("llama3.jinja").caps
    assert caps.supports_tools and caps.supports_tool_calls and caps.supports_object_arguments
    assert not caps.supports_parallel_tool_calls


def test_chatml_caps() -> None:
    caps = ChatTemplate("chatml").caps
    assert caps.supports_system_role and caps.supports_string_content
    assert not (caps.supports_tools or caps.supports_tool_calls or caps.supports_typed_content)


def test_system_prompt_opens_the_first_message_without_a_system_role() -> None:
    gemma = load("gemma2.jinja")
    assert not gemma.caps.supports_system_role
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert apply_chat_template(gemma, messages).prompt == (
        "<bos><start_of_turn>user\nBe brief.\nhi<end_of_turn>\n<start_of_turn>model\n")
    assert template_messages([{"role": "system", "content": "Be brief."}], caps=gemma.caps) == []


def test_template_errors_still_reach_the_request() -> None:
    messages = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(Exception, match="Conversation roles must alternate"):
        apply_chat_template(load("gemma2.jinja"), messages)


def test_typed_content_template_gets_parts() -> None:
    template = ChatTemplate(
        "{% for m in messages %}[{% for p in m.content %}{{ p.text }};{% endfor %}]{% endfor %}"
        "{{ (messages[0].content | selectattr('type', 'equalto', 'text') | first).text }}")
    caps = template.caps
    assert caps.supports_typed_content and not caps.supports_string_content
    assert apply_chat_template(template, [{"role": "user", "content": "plain"}]).prompt == "[plain;]plain"
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert apply_chat_template(template, [{"role": "user", "content": parts}]).prompt == "[a;b;]a"


def test_arguments_stay_text_for_a_template_that_prints_them() -> None:
    template = ChatTemplate(
        "{% for m in messages %}{{ m.content }}{% for c in m.tool_calls or [] %}<{{ c.function.name }} "
        "{{ c.function.arguments }}>{% endfor %}{% endfor %}")
    assert template.caps.supports_tool_calls and not template.caps.supports_object_arguments
    call = {"type": "function", "function": {"name": "f", "arguments": '{"city": "Paris"}'}}
    object_call = {"type": "function", "function": {"name": "g", "arguments": {"n": 1}}}
    bad = {"type": "function", "function": {"name": "h", "arguments": "{not json"}}
    messages = [{"role": "user", "content": "q"},
                {"role": "assistant", "content": "", "tool_calls": [call, object_call, bad]},
                {"role": "user", "content": "next"}]
    prompt = apply_chat_template(template, messages).prompt
    assert prompt == 'q<f {"city": "Paris"}><g {"n":1}><h {not json>next'


def test_object_arguments_template_refuses_bad_json() -> None:
    call = {"type": "function", "function": {"name": "h", "arguments": "{not json"}}
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [call]},
                {"role": "user", "content": "next"}]
    with pytest.raises(ChatRequestError, match="Failed to parse tool call arguments"):
        apply_chat_template(load("qwen3.jinja"), messages)


def test_prefill_with_a_merged_system_prompt() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "Sure"}]
    assert apply_chat_template(load("gemma2.jinja"), messages).prompt == (
        "<bos><start_of_turn>user\nBe brief.\nhi<end_of_turn>\n<start_of_turn>model\nSure")
