"""/infill's FIM markers read from a vocabulary, and b10621's refusal when they are missing."""

from __future__ import annotations

from mlxd.api.routes.infill import fim_tokens, refusal
from tests.e2e.captures import load


def test_no_markers_is_refused_with_upstreams_words() -> None:
    expected = load("post_infill").json()["error"]["message"]
    assert refusal(fim_tokens({"a": 0, "b": 1})) == expected


def test_each_missing_marker_is_named() -> None:
    fim = fim_tokens({"<fim_prefix>": 5, "<|fim_middle|>": 7})
    assert fim == {"prefix": 5, "middle": 7}
    assert refusal(fim) == "Infill is not supported by this model: suffix token is missing. "


def test_qwen_and_codellama_spellings() -> None:
    qwen = {"<|fim_prefix|>": 1, "<|fim_suffix|>": 2, "<|fim_middle|>": 3, "<|file_sep|>": 4, "<|repo_name|>": 5}
    assert fim_tokens(qwen) == {"prefix": 1, "suffix": 2, "middle": 3, "repo": 5, "sep": 4}
    assert refusal(fim_tokens({"<PRE>": 1, "<SUF>": 2, "<MID>": 3})) is None


def test_spm_infill_puts_the_suffix_block_before_the_prefix_block(tiny_model) -> None:
    """--spm-infill: [FIM_SUF] suffix [FIM_PRE] prefix [FIM_MID] prompt, instead of prefix first."""
    from mlxd.api.prompts import encode
    from mlxd.api.routes.infill import infill_prompt

    tokenizer = tiny_model.tokenizer
    fim = fim_tokens(tokenizer.get_vocab())
    body = {"input_prefix": "def f(x):\n    ", "input_suffix": "\n    return y\n", "prompt": "y ="}
    prefix = [fim["prefix"]] + encode(tokenizer, body["input_prefix"], False)
    suffix = [fim["suffix"]] + encode(tokenizer, body["input_suffix"], False)
    middle = [fim["middle"]] + encode(tokenizer, body["prompt"], False)
    n = len(prefix) + len(suffix) + len(middle)
    assert infill_prompt(tokenizer, fim, body)[-n:] == prefix + suffix + middle
    assert infill_prompt(tokenizer, fim, body, spm=True)[-n:] == suffix + prefix + middle
