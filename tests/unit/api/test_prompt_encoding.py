"""Prompts are tokenized through the Rust tokenizer's batch call, which must give what the tokenizer's own encode
gives (it only leaves out the offsets, and holds the GIL for less); very long texts in a child process, which must
give the same ids."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlx_lm.utils import load_tokenizer

from mlxd.api import child_tokenizer
from mlxd.api.pieces import vocabulary
from mlxd.api.prompts import encode

TEXTS = ["Hello world", " a leading space", "<|im_start|>user\nhi<|im_end|>", "def f(x):\n    return x * 2\n", "",
         "naïve café, 東京", "x" * 5000]
FIXTURE = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "tiny-llama"


def _checkpoints(tiny_checkpoint: Path) -> list[Path]:
    return [tiny_checkpoint] + ([FIXTURE] if FIXTURE.is_dir() else [])  # the llama fixture has a BOS


@pytest.mark.parametrize("add_special", [True, False])
def test_encode_gives_the_tokenizers_own_ids(tiny_checkpoint: Path, add_special: bool) -> None:
    for path in _checkpoints(tiny_checkpoint):
        tokenizer = load_tokenizer(path)
        assert getattr(tokenizer, "backend_tokenizer", None) is not None  # the fast path is the one taken
        for text in TEXTS:
            assert encode(tokenizer, text, add_special) == list(tokenizer.encode(text, add_special_tokens=add_special))


def test_tokenize_gives_the_tokenizers_own_ids(tiny_checkpoint: Path) -> None:
    tokenizer = load_tokenizer(tiny_checkpoint)
    vocab = vocabulary(tokenizer)
    for text in TEXTS:
        assert vocab.tokenize(text, add_special=True, parse_special=True) == list(tokenizer.encode(text))


@pytest.fixture
def child_for_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every text goes to a child process (the threshold is meant for multi-megabyte texts)."""
    monkeypatch.setattr(child_tokenizer, "CHILD_CHARS", 1)


@pytest.mark.usefixtures("child_for_all")
def test_a_child_process_gives_the_same_ids(tiny_checkpoint: Path, caplog: pytest.LogCaptureFixture) -> None:
    long = "<|im_start|>user\nnaïve café, 東京 " * 400
    for path in _checkpoints(tiny_checkpoint):
        tokenizer = load_tokenizer(path)
        vocab = vocabulary(tokenizer)
        for add_special in (True, False):
            assert encode(tokenizer, long, add_special) == list(tokenizer.encode(long, add_special_tokens=add_special))
            for parse_special in (True, False):
                in_child = vocab.tokenize(long, add_special=add_special, parse_special=parse_special)
                tokens = vocab._plain_text() if not parse_special else vocab.tokenizer
                assert in_child == tokens.encode(long, add_special_tokens=add_special).ids
    assert "child process failed" not in caplog.text  # the ids above came from children, not the fallback


@pytest.mark.usefixtures("child_for_all")
def test_when_no_child_can_run_the_text_is_tokenized_here(tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    tokenizer = load_tokenizer(tiny_checkpoint)
    monkeypatch.setattr(child_tokenizer.sys, "executable", str(tiny_checkpoint / "no-such-python"))
    assert encode(tokenizer, "Hello world", True) == list(tokenizer.encode("Hello world"))
    assert "child process failed" in caplog.text
