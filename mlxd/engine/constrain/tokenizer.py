"""The bridge from a checkpoint's Hugging Face tokenizer to llguidance's, built once per loaded model."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llguidance

from mlxd.engine.constrain.errors import ConstraintError


@dataclass(frozen=True)
class ConstraintTokenizer:
    """llguidance's view of a model's vocabulary, sized to the model's output layer.

    ``n_vocab`` is the number of logits the model produces, which can exceed the tokenizer's size (padded
    embedding tables); ids the tokenizer does not have are never allowed by a constraint.
    """

    ll: llguidance.LLTokenizer
    n_vocab: int
    eos_token_ids: tuple[int, ...]

    @property
    def mask_words(self) -> int:
        """32-bit words in one row of a token bitmask covering the whole output layer."""
        return (self.n_vocab + 31) // 32

    def single_token(self, text: str) -> int | None:
        """The id of ``text`` when it is exactly one token (special tokens included), else None."""
        ids = self.ll.tokenize_str(text, parse_special=True)
        return ids[0] if len(ids) == 1 else None

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token stands for; special tokens give their text, as llama.cpp's pieces do."""
        if token >= self.ll.vocab_size:
            return b""
        data = self.ll.decode_bytes([token])
        # llguidance marks special tokens with a 0xFF prefix byte, which is not text.
        return data[1:] if data[:1] == b"\xff" else data


def _tokenizer_json(source: Any) -> str:
    """Serialized ``tokenizers`` JSON from a path, a ``tokenizers.Tokenizer``, a fast HF tokenizer or mlx-lm's
    wrapper."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_dir():
            path = path / "tokenizer.json"
        try:
            return path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConstraintError(f"cannot read the tokenizer for constrained decoding: {exc}") from exc
    inner = getattr(source, "_tokenizer", source)  # mlx_lm's TokenizerWrapper holds the HF tokenizer here
    backend = getattr(inner, "backend_tokenizer", inner)  # a PreTrainedTokenizerFast wraps a tokenizers.Tokenizer
    if not hasattr(backend, "to_str"):
        raise ConstraintError(
            f"constrained decoding needs a fast (tokenizers-based) tokenizer, not {type(inner).__name__}"
        )
    # Padding and truncation settings must not leak into how llguidance reads the vocabulary.
    data = json.loads(backend.to_str())
    data["padding"] = None
    data["truncation"] = None
    return json.dumps(data)


def _eos_ids(source: Any, explicit: Iterable[int] | None) -> list[int]:
    if explicit is not None:
        return sorted(set(explicit))
    found = getattr(source, "eos_token_ids", None)  # mlx_lm's wrapper: a set
    if found:
        return sorted(found)
    single = getattr(getattr(source, "_tokenizer", source), "eos_token_id", None)
    return [single] if isinstance(single, int) else []


def build_tokenizer(
    source: Any, *, n_vocab: int | None = None, eos_token_ids: Iterable[int] | None = None
) -> ConstraintTokenizer:
    """Build llguidance's tokenizer for a model (~1 s for a large vocabulary: build it once per load).

    ``source`` is a checkpoint directory or tokenizer.json path, a ``tokenizers.Tokenizer``, a
    ``PreTrainedTokenizerFast`` or mlx-lm's ``TokenizerWrapper``; ``n_vocab`` is the model's output-layer size.
    """
    text = _tokenizer_json(source)
    eos = _eos_ids(source, eos_token_ids)
    try:
        probe = llguidance.LLTokenizer(text, eos_token=eos or None)
        size = max(n_vocab or 0, probe.vocab_size)
        ll = probe if size == probe.vocab_size else llguidance.LLTokenizer(text, n_vocab=size, eos_token=eos or None)
    except (ValueError, RuntimeError) as exc:
        raise ConstraintError(f"cannot build the tokenizer for constrained decoding: {exc}") from exc
    return ConstraintTokenizer(ll=ll, n_vocab=size, eos_token_ids=tuple(eos or [ll.eos_token]))
