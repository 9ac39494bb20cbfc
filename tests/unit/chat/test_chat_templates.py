"""Loading and rendering chat templates: built-in names, the HF-compatible environment, typed errors."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from mlxd.engine.chat import (
    ChatTemplate,
    ChatTemplateError,
    load_chat_template,
)

FIXTURES = Path(__file__).parent / "fixtures"
HELLO = [{"role": "user", "content": "hello"}]


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_chatml_builtin_renders_as_llama_server_apply_template() -> None:
    # The body of b10621's POST /apply-template capture for this message.
    assert ChatTemplate("chatml").render(HELLO) == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("name", ["llama3", " gemma\n", "mistral-v7", "deepseek3"])
def test_builtin_name_is_its_format_not_rendered_as_text(name: str) -> None:
    template = ChatTemplate(name)
    assert template.builtin == name.strip()
    assert template.render(HELLO) != name and "hello" in template.render(HELLO)


def test_syntax_error_is_typed_with_line() -> None:
    with pytest.raises(ChatTemplateError, match=r"invalid chat template \(test\), line 2: unexpected"):
        ChatTemplate("{% for m in messages %}\n{{ m.content }", origin="test")


def test_raise_exception_message_reaches_caller() -> None:
    template = ChatTemplate(fixture("llama3.jinja"), bos_token="<|begin_of_text|>")
    call = {"type": "function", "function": {"name": "f", "arguments": {}}}
    messages = HELLO + [{"role": "assistant", "content": "", "tool_calls": [call, call]}]
    with pytest.raises(ChatTemplateError) as info:
        template.render(messages)
    assert info.value.message == ("Jinja Exception: This model only supports single tool-calls at once! "
                                  "(chat template: inline text)")


def test_runtime_error_inside_template_is_typed() -> None:
    template = ChatTemplate("{{ messages[0].content + 1 }}")
    with pytest.raises(ChatTemplateError, match="TypeError"):
        template.render(HELLO)


def test_sandbox_refuses_attribute_escape() -> None:
    template = ChatTemplate("{{ ''.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(ChatTemplateError):
        template.render(HELLO)


def test_lists_are_mutable_but_the_request_is_not_changed() -> None:
    # Kimi K2's templates append to lists they build (llama-server's runtime allows it); what a template changes
    # in its copy of the messages never reaches the caller's.
    template = ChatTemplate("{% set xs = [] %}{% set _ = xs.append(1) %}{{ xs }}"
                            "{% set _ = messages[0].update({'content': 'changed'}) %}{{ messages[0].content }}")
    messages = [{"role": "user", "content": "hello"}]
    assert template.render(messages) == "[1]changed"
    assert messages == [{"role": "user", "content": "hello"}]


def test_tojson_keeps_markup_and_takes_indent() -> None:
    template = ChatTemplate("{{ tools[0] | tojson }}|{{ tools[0] | tojson(indent=2) }}")
    tool = {"name": "<b>", "x": "é"}
    out = template.render(HELLO, tools=[tool])
    compact, indented = out.split("|")
    assert compact == '{"name": "<b>", "x": "é"}'
    assert json.loads(indented) == tool and "\n  " in indented


def test_tools_undefined_unless_given() -> None:
    template = ChatTemplate("{{ tools is defined }}")
    assert template.render(HELLO) == "False"
    assert template.render(HELLO, tools=[]) == "False"
    assert template.render(HELLO, tools=[{"type": "function"}]) == "True"


def test_trim_and_lstrip_blocks_as_transformers() -> None:
    source = "{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}"
    assert ChatTemplate(source).render(HELLO + HELLO) == "[hello]\n[hello]\n"


def test_clock_globals_follow_the_given_time() -> None:
    template = ChatTemplate("{{ strftime_now('%Y-%m-%d') }} {{ date_string }} {{ datetime }}")
    assert template.render(HELLO, now=datetime(2025, 3, 1)) == "2025-03-01 01 Mar 2025 Mar 01 2025"


def test_environment_strftime_now_works_without_render_variables() -> None:
    # The environment's own global (what a compiled template reaches when rendered outside ChatTemplate.render);
    # it once raised NameError for a missing import.
    from mlxd.engine.chat.jinja_env import compile_template

    rendered = compile_template("{{ strftime_now('%Y') }}|{{ strftime_now('%%') }}", "test").render()
    year, percent = rendered.split("|")
    assert year.isdigit() and len(year) == 4 and percent == "%"


def test_generation_tag_renders_its_body() -> None:
    template = ChatTemplate("{% for m in messages %}{% generation %}<{{ m.content }}>{% endgeneration %}{% endfor %}")
    assert template.render(HELLO) == "<hello>"


def test_loop_controls_are_available() -> None:
    template = ChatTemplate("{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.content }}{% endfor %}")
    assert template.render(HELLO + HELLO) == "hello"


def test_context_and_bos_reach_the_template() -> None:
    template = ChatTemplate("{{ bos_token }}{{ eos_token }}{{ custom }}", bos_token="<s>", eos_token="</s>")
    assert template.render(HELLO, context={"custom": 7}) == "<s></s>7"


@pytest.mark.parametrize(("name", "expected"), [("qwen3.jinja", True), ("deepseek_r1.jinja", True),
                                                ("llama3.jinja", False)])
def test_supports_thinking(name: str, expected: bool) -> None:
    assert ChatTemplate(fixture(name)).supports_thinking is expected


def test_supports_thinking_detected_by_rendering() -> None:
    template = ChatTemplate("{{ messages[0].content }}{% if not enable_thinking %}<think></think>{% endif %}")
    assert template.supports_thinking
    assert not ChatTemplate("chatml").supports_thinking
    # A switch that only words the preamble differently is no reasoning block (llama-server: Apertus).
    assert not ChatTemplate("{% if enable_thinking %}T{% endif %}{{ messages[0].content }}").supports_thinking


def _write_config(directory: Path, **config: object) -> None:
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")


def test_load_from_tokenizer_config_with_added_token_objects(tmp_path: Path) -> None:
    _write_config(tmp_path, chat_template="{{ bos_token }}{{ messages[0].content }}",
                  bos_token={"content": "<s>", "lstrip": False}, eos_token="</s>")
    template = load_chat_template(tmp_path)
    assert (template.bos_token, template.eos_token) == ("<s>", "</s>")
    assert template.render(HELLO) == "<s>hello"


def test_load_named_templates_uses_tool_use_variant_with_tools(tmp_path: Path) -> None:
    _write_config(tmp_path, chat_template=[
        {"name": "default", "template": "D{{ messages[0].content }}"},
        {"name": "tool_use", "template": "T{{ tools | length }}"},
    ])
    template = load_chat_template(tmp_path)
    assert template.has_tool_use_variant
    assert template.render(HELLO) == "Dhello"
    assert template.render(HELLO, tools=[{"type": "function"}]) == "T1"


def test_chat_template_jinja_file_wins_over_tokenizer_config(tmp_path: Path) -> None:
    _write_config(tmp_path, chat_template="config")
    (tmp_path / "chat_template.jinja").write_text("jinja {{ messages[0].content }}", encoding="utf-8")
    assert load_chat_template(tmp_path).render(HELLO) == "jinja hello"


def test_additional_tool_use_template_is_read(tmp_path: Path) -> None:
    (tmp_path / "chat_template.jinja").write_text("D{{ '' }}", encoding="utf-8")
    (tmp_path / "additional_chat_templates").mkdir()
    (tmp_path / "additional_chat_templates" / "tool_use.jinja").write_text("T{{ tools | length }}", encoding="utf-8")
    template = load_chat_template(tmp_path)
    assert template.render(HELLO) == "D" and template.render(HELLO, tools=[{"type": "function"}]) == "T1"


def test_chat_template_json_is_read(tmp_path: Path) -> None:
    (tmp_path / "chat_template.json").write_text(json.dumps({"chat_template": "J{{ messages[0].content }}"}))
    assert load_chat_template(tmp_path).render(HELLO) == "Jhello"


def test_checkpoint_without_template_falls_back_to_chatml(tmp_path: Path) -> None:
    _write_config(tmp_path, eos_token="<|im_end|>")
    assert load_chat_template(tmp_path).source == ChatTemplate("chatml").source


def test_override_text_and_file(tmp_path: Path) -> None:
    _write_config(tmp_path, chat_template="config {{ messages[0].content }}")
    assert load_chat_template(tmp_path, chat_template="cli {{ messages[0].content }}").render(HELLO) == "cli hello"
    path = tmp_path / "t.jinja"
    path.write_text("file {{ messages[0].content }}", encoding="utf-8")
    assert load_chat_template(tmp_path, chat_template_file=path).render(HELLO) == "file hello"
    with pytest.raises(ChatTemplateError, match="both set"):
        load_chat_template(tmp_path, chat_template="chatml", chat_template_file=path)
    with pytest.raises(ChatTemplateError, match="missing.jinja"):
        load_chat_template(tmp_path, chat_template_file=tmp_path / "missing.jinja")
    assert load_chat_template(tmp_path, chat_template="zephyr").render(HELLO) == (
        "<|user|>\nhello<|endoftext|>\n<|assistant|>\n")



def test_bad_named_template_list_is_refused(tmp_path: Path) -> None:
    _write_config(tmp_path, chat_template=[{"name": "default"}])
    with pytest.raises(ChatTemplateError, match="'name' and 'template'"):
        load_chat_template(tmp_path)
    _write_config(tmp_path, chat_template=3)
    with pytest.raises(ChatTemplateError, match="string or a list"):
        load_chat_template(tmp_path)


def test_unreadable_tokenizer_config_is_typed(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ChatTemplateError, match="tokenizer_config.json"):
        load_chat_template(tmp_path)
