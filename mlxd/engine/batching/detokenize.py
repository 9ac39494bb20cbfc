"""Incremental detokenization that keeps a continuation's leading space and holds back split characters.

mlx_lm's streaming detokenizers drop the leading space of the first generated piece (they assume a fresh text),
but a completion continues its prompt, and llama-server sends " word" there. Decoding a short window that starts
inside the prompt, and emitting only what the newest token adds to it, keeps that space for every tokenizer family
(byte-level BPE and sentencepiece alike) and never emits half of a multi-byte character.
"""

from __future__ import annotations

from typing import Any, Callable

# Prompt tokens decoded ahead of the first generated token, so that its piece is read in context.
_CONTEXT_TOKENS = 4
_REPLACEMENT = "\ufffd"


def fast_decoder(tokenizer: Any, *, special: bool = False) -> Callable[[list[int]], str]:
    """The cheapest ``ids -> text`` function the tokenizer offers: special tokens are skipped, as llama-server does
    unless ``--special`` (``special``) asks for them to be rendered."""
    hf = getattr(tokenizer, "_tokenizer", tokenizer)  # mlx_lm's TokenizerWrapper wraps the HF tokenizer
    backend = getattr(hf, "backend_tokenizer", None) or getattr(hf, "_tokenizer", None)
    skip = not special
    if backend is not None and hasattr(backend, "decode"):
        return lambda ids: backend.decode(ids, skip_special_tokens=skip)
    return lambda ids: hf.decode(ids, skip_special_tokens=skip)


class IncrementalDetokenizer:
    """Turns a stream of token ids into text pieces; ``add`` returns what may be shown now."""

    def __init__(self, decode: Callable[[list[int]], str], prompt_tokens: list[int]) -> None:
        self._decode = decode
        self._ids: list[int] = list(prompt_tokens[-_CONTEXT_TOKENS:])
        self._prefix = 0  # start of the decoding window
        self._read = len(self._ids)  # tokens before this index have been emitted
        self._prefix_text = self._decode(self._ids) if self._ids else ""

    def add(self, token: int) -> str:
        """Take one token; return the text it completes (possibly empty while a character is split)."""
        self._ids.append(token)
        text = self._decode(self._ids[self._prefix :])
        if len(text) <= len(self._prefix_text) or text.endswith(_REPLACEMENT):
            return ""
        piece = text[len(self._prefix_text) :]
        # Slide the window: the newest tokens become the context of the next piece.
        self._prefix, self._read = self._read, len(self._ids)
        if self._prefix > 64:
            del self._ids[: self._prefix]
            self._read -= self._prefix
            self._prefix = 0
        self._prefix_text = self._decode(self._ids[self._prefix : self._read])
        return piece

    def flush(self) -> str:
        """Whatever is still held back (an incomplete character decodes to U+FFFD)."""
        if self._read >= len(self._ids):
            return ""
        text = self._decode(self._ids[self._prefix :])
        self._read = len(self._ids)
        return text[len(self._prefix_text) :]
