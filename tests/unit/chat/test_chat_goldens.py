"""mlxd renders the corpus as llama-server renders it: its own /apply-template answers, captured once.

tests/fixtures/templates/goldens/goldens.json holds llama-server b10622's ``/apply-template`` prompts (made by
``goldens/capture.py``, on tiny-llama.gguf: bos ``<s>``, eos ``</s>``, a vocabulary that adds the bos) for every
corpus template and every conversation of ``goldens/conversations.json``; mlxd renders each with the same tokens,
the same clock, and must give the same text, or refuse where llama-server refused.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from mlxd.engine.chat import ChatOptions, ChatTemplate, ChatTemplateError, apply_chat_template, load_chat_template

CORPUS = Path(__file__).parents[2] / "fixtures" / "templates"
GOLDENS = json.loads((CORPUS / "goldens" / "goldens.json").read_text(encoding="utf-8"))
CONVERSATIONS: dict[str, dict[str, Any]] = json.loads(
    (CORPUS / "goldens" / "conversations.json").read_text(encoding="utf-8"))
CAPTURED = datetime.fromisoformat(GOLDENS["captured"])
CASES = [(name, shape) for name, shapes in sorted(GOLDENS["templates"].items()) for shape in sorted(shapes)]
OPTIONS = ChatOptions(tokenizer_adds_bos=True)


@cache
def template(name: str) -> ChatTemplate:
    return load_chat_template(chat_template_file=CORPUS / f"{name}.jinja", bos_token="<s>", eos_token="</s>")


def test_every_template_and_conversation_was_captured() -> None:
    assert len(GOLDENS["templates"]) == 68
    assert all(set(shapes) == set(CONVERSATIONS) for shapes in GOLDENS["templates"].values())


@pytest.mark.parametrize(("name", "shape"), CASES)
def test_same_prompt_as_llama_server(name: str, shape: str) -> None:
    golden = GOLDENS["templates"][name][shape]
    body = CONVERSATIONS[shape]

    def render() -> str:
        return apply_chat_template(
            template(name), body["messages"], options=OPTIONS, tools=body.get("tools"),
            add_generation_prompt=body.get("add_generation_prompt", True),
            chat_template_kwargs=body.get("chat_template_kwargs"), now=CAPTURED).prompt

    if "prompt" in golden:
        assert render() == golden["prompt"]
    else:  # llama-server refused it (Gemma 2 knows no tool role): so does mlxd, with a 4xx-class error
        assert golden["status"] == 400
        with pytest.raises(ChatTemplateError):
            render()
