"""Every template of llama.cpp's corpus (tests/fixtures/templates) renders the five conversation shapes.

The tool-call shape carries ``function.arguments`` as a JSON string, as the openai client sends it: templates that
iterate the arguments (Qwen3-Coder, GLM 4.6+, Kimi K2, MiniMax, Nemotron 3, Seed-OSS, ...) must get an object.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from mlxd.engine.chat import ChatTemplate, ChatTemplateError, apply_chat_template, load_chat_template

CORPUS = Path(__file__).parents[2] / "fixtures" / "templates"
NAMES = sorted(p.stem for p in CORPUS.glob("*.jinja"))
WHEN = datetime(2025, 3, 1)
# The conversations, shared with the llama-server goldens; the first five are the shapes every template renders.
CONVERSATIONS: dict[str, dict[str, Any]] = json.loads(
    (CORPUS / "goldens" / "conversations.json").read_text(encoding="utf-8"))
SHAPES = {name: CONVERSATIONS[name] for name in ("plain", "system", "multi", "tool-offer", "tool-call")}
TOOL = SHAPES["tool-call"]["tools"][0]
CALL_ID = "call00001"  # nine letters and digits: Mistral's templates refuse any other id
# What must reach the prompt in each shape; a template that describes tools shows the offered one, and one that
# takes tool calls shows the call's argument and the tool's result (Phi 3.5 or RWKV drop what they cannot place).
EXPECTED = {"plain": ["Hello there"], "system": ["Hello there"], "multi": ["Hi, how can I help?", "Tell me a joke"],
            "tool-offer": ["Weather in Paris?"], "tool-call": ["Weather in Paris?"]}
WITH_TOOLS = ["get_weather"]
WITH_TOOL_CALLS = ["get_weather", "Paris", "Sunny, 21C"]
# The one template that itself refuses a shape, as it does under llama-server: Gemma 2 knows no tool role.
REFUSED = {("google-gemma-2-2b-it", "tool-call"): "Conversation roles must alternate"}

CASES = [(name, shape) for name in NAMES for shape in SHAPES]


@cache
def corpus_template(name: str) -> ChatTemplate:
    """A corpus template, loaded (and probed) once per test session."""
    return load_chat_template(chat_template_file=CORPUS / f"{name}.jinja", bos_token="<s>", eos_token="</s>")


def test_the_whole_corpus_is_here() -> None:
    assert len(NAMES) == 68


@pytest.mark.parametrize(("name", "shape"), CASES)
def test_template_renders_the_shape(name: str, shape: str) -> None:
    template = corpus_template(name)
    conversation = SHAPES[shape]
    if (name, shape) in REFUSED:
        with pytest.raises(ChatTemplateError, match=REFUSED[(name, shape)]):
            apply_chat_template(template, conversation["messages"], tools=conversation.get("tools"), now=WHEN)
        return
    prompt = apply_chat_template(template, conversation["messages"], tools=conversation.get("tools"), now=WHEN).prompt
    expected = list(EXPECTED[shape])
    if shape == "tool-offer" and template.caps.supports_tools:
        expected += WITH_TOOLS
    if shape == "tool-call" and template.caps.supports_tool_calls:
        expected += WITH_TOOL_CALLS
    for text in expected:
        assert text in prompt, f"{text!r} missing from {name}'s {shape} prompt"


@pytest.mark.parametrize("name", NAMES)
def test_string_arguments_reach_templates_that_take_objects(name: str) -> None:
    """The call renders the same whether the client sent its arguments as JSON text or as an object."""
    template = corpus_template(name)
    if (name, "tool-call") in REFUSED or not template.caps.supports_tool_calls:
        return
    conversation = SHAPES["tool-call"]
    as_text = apply_chat_template(template, conversation["messages"], tools=[TOOL], now=WHEN).prompt
    messages = [dict(m) for m in conversation["messages"]]
    messages[1] = {**messages[1], "tool_calls": [
        {"id": CALL_ID, "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}
    as_object = apply_chat_template(template, messages, tools=[TOOL], now=WHEN).prompt
    if template.caps.supports_object_arguments:
        assert as_text == as_object
    assert "get_weather" in as_text
