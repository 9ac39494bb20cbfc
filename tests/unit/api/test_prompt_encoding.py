"""Prompts are tokenized through the Rust tokenizer's batch call, which must give what the tokenizer's own encode
gives (it only leaves out the offsets, and holds the GIL for less)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlx_lm.utils import load_tokenizer

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
