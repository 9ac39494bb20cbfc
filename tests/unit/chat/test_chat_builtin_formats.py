"""llama.cpp's built-in chat formats: every b10621 name served, --no-jinja detection, against libllama's own table.

tests/fixtures/legacy/test-chat-template-cases.json is the case table of llama.cpp b10622's
tests/test-chat-template.cpp (data only): real templates, and the prompt libllama's built-in formats make of one
conversation (``expected_output``) and the prompt its Jinja path makes (``expected_output_jinja``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlxd.engine.chat import (
    UPSTREAM_TEMPLATE_NAMES,
    ChatRequestError,
    ChatTemplate,
    ChatTemplateError,
    apply_chat_template,
    load_chat_template,
)
from mlxd.engine.chat.legacy_detect import detect_format

TABLE = json.loads((Path(__file__).parents[2] / "fixtures" / "legacy" / "test-chat-template-cases.json")
                   .read_text(encoding="utf-8"))
CONVERSATION = [{"role": role, "content": content} for role, content in TABLE["conversation"]]
CASES: list[dict[str, Any]] = TABLE["cases"]
# b10621's `llama-server --help`, the list under --chat-template.
B10621_NAMES = """bailing, bailing-think, bailing2, chatglm3, chatglm4, chatml, command-r, deepseek, deepseek-ocr,
deepseek2, deepseek3, exaone-moe, exaone3, exaone4, falcon3, gemma, gigachat, glmedge, gpt-oss, granite, granite-4.0,
granite-4.1, grok-2, hunyuan-dense, hunyuan-moe, hunyuan-vl, kimi-k2, llama2, llama2-sys, llama2-sys-bos,
llama2-sys-strip, llama3, llama4, megrez, minicpm, mistral-v1, mistral-v3, mistral-v3-tekken, mistral-v7,
mistral-v7-tekken, monarch, openchat, orion, pangu-embedded, phi3, phi4, rwkv-world, seed_oss, smolvlm, solar-open,
vicuna, vicuna-orca, yandex, zephyr"""
HELLO = [{"role": "system", "content": "You are a test."}, {"role": "user", "content": "Hi there"}]


def conversation(case: dict[str, Any]) -> list[dict[str, str]]:
    extra = [{"role": role, "content": content} for role, content in case.get("extra_conversation", [])]
    return CONVERSATION + extra


def test_every_b10621_name_is_served() -> None:
    assert UPSTREAM_TEMPLATE_NAMES == {name.strip() for name in B10621_NAMES.split(",")}


@pytest.mark.parametrize("name", sorted(UPSTREAM_TEMPLATE_NAMES))
def test_name_renders_its_format_with_and_without_jinja(name: str) -> None:
    for jinja in (True, False):
        template = load_chat_template(chat_template=name, jinja=jinja)
        prompt = apply_chat_template(template, HELLO).prompt
        assert "Hi there" in prompt and prompt != name


def test_command_r_as_llama_servers_suite_expects() -> None:
    # tools/server/tests/unit/test_chat_completion.py::test_apply_chat_template
    prompt = apply_chat_template(load_chat_template(chat_template="command-r", jinja=False), HELLO).prompt
    assert prompt == ("<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a test.<|END_OF_TURN_TOKEN|>"
                      "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>"
                      "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>")


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_no_jinja_detects_and_renders_as_libllama(case: dict[str, Any]) -> None:
    template = ChatTemplate(case["template_str"], bos_token=case.get("bos_token", ""),
                            eos_token=case.get("eos_token", ""), jinja=False)
    assert template.builtin == detect_format(case["template_str"])
    assert template.render(conversation(case)) == case["expected_output"]


JINJA_CASES = [c for c in CASES if c.get("supported_with_jinja", True)]


@pytest.mark.parametrize("case", JINJA_CASES, ids=[c["name"] for c in JINJA_CASES])
def test_jinja_renders_the_same_templates_as_llama_server(case: dict[str, Any]) -> None:
    template = ChatTemplate(case["template_str"], bos_token=case.get("bos_token", ""),
                            eos_token=case.get("eos_token", ""))
    expected = case.get("expected_output_jinja") or case["expected_output"]
    assert apply_chat_template(template, conversation(case)).prompt == expected


def test_no_jinja_refuses_a_template_it_cannot_match() -> None:
    with pytest.raises(ChatTemplateError, match="not supported without Jinja"):
        load_chat_template(chat_template="{{ messages[0].content }}", jinja=False)


def test_text_without_markup_renders_literally_under_jinja() -> None:
    # llama-server renders such text as a template without tags; its suite sends a chat through one.
    template = load_chat_template(chat_template="This is not a chat template, it is")
    assert apply_chat_template(template, HELLO).prompt == "This is not a chat template, it is"


@pytest.mark.parametrize("jinja", [True, False])
def test_builtin_format_refuses_tools(jinja: bool) -> None:
    template = load_chat_template(chat_template="llama3", jinja=jinja)
    tool = {"type": "function", "function": {"name": "f", "parameters": {}}}
    with pytest.raises(ChatRequestError, match="tools param requires"):
        apply_chat_template(template, HELLO, tools=[tool])
    with pytest.raises(ChatRequestError, match="tool_choice param requires"):
        apply_chat_template(template, HELLO, tool_choice="required")


def test_builtin_format_answers_are_content() -> None:
    prompt = apply_chat_template(load_chat_template(chat_template="deepseek3"), HELLO)
    assert prompt.reasoning_format == "none" and not prompt.parse_tool_calls
