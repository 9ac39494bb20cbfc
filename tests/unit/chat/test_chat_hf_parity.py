"""Templates render here exactly as transformers renders them (the library mlx-lm's tokenizers use)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from transformers.utils import chat_template_utils

from mlxd.engine.chat import ChatTemplate

FIXTURES = Path(__file__).parent / "fixtures"
# Its annotations say it returns a string; it returns (rendered chats, generation indices).
render_jinja_template: Any = chat_template_utils.render_jinja_template
WHEN = datetime(2025, 3, 1)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather <now>",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
CONVERSATIONS: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = {
    "single": ([{"role": "user", "content": "hello"}], None),
    "multi": ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"},
               {"role": "user", "content": "  what's up?  "}], None),
    "system": ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], None),
    "reasoning": ([{"role": "user", "content": "q"},
                   {"role": "assistant", "content": "a", "reasoning_content": "thought"},
                   {"role": "user", "content": "q2"}], None),
    "tools": ([{"role": "user", "content": "Weather in Paris?"},
               {"role": "assistant", "content": "", "tool_calls": [CALL]},
               {"role": "tool", "tool_call_id": "c1", "content": "sunny"}], TOOLS),
}
TEMPLATES = {"qwen3.jinja": {"system", "single", "multi", "reasoning", "tools"},
             "llama3.jinja": {"system", "single", "multi", "tools"},
             "gemma2.jinja": {"single", "multi"},
             "deepseek_r1.jinja": {"system", "single", "multi", "reasoning"}}
CASES = [(name, conv, agp, thinking) for name, convs in TEMPLATES.items() for conv in sorted(convs)
         for agp in (True, False) for thinking in (True, False)]


@pytest.mark.parametrize(("name", "conversation", "add_generation_prompt", "enable_thinking"), CASES)
def test_same_text_as_transformers(name: str, conversation: str, add_generation_prompt: bool,
                                   enable_thinking: bool) -> None:
    source = (FIXTURES / name).read_text(encoding="utf-8")
    messages, tools = CONVERSATIONS[conversation]
    context = {"enable_thinking": enable_thinking}
    ours = ChatTemplate(source, bos_token="<s>", eos_token="</s>").render(
        messages, tools=tools, add_generation_prompt=add_generation_prompt, context=context, now=WHEN)
    rendered, _ = render_jinja_template(
        [messages], tools=tools, chat_template=source, add_generation_prompt=add_generation_prompt,
        bos_token="<s>", eos_token="</s>", date_string="01 Mar 2025", datetime="Mar 01 2025", **context)
    assert ours == rendered[0]


def test_builtin_chatml_matches_transformers() -> None:
    template = ChatTemplate("chatml")
    messages = CONVERSATIONS["multi"][0]
    rendered, _ = render_jinja_template([messages], chat_template=template.source, add_generation_prompt=True)
    assert template.render(messages) == rendered[0]
