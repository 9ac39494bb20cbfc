"""Tokens as llama-server shows them: each token's raw bytes (its "piece"), tokenizing with its switches."""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from typing import Any

from tokenizers import Tokenizer, decoders

from mlxd.api import child_tokenizer
from mlxd.errors import InvalidRequest

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-ins for the 256 byte values, reversed."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1)
    )
    stand_ins = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            stand_ins.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, stand_ins)}


def backend(tokenizer: Any) -> Tokenizer:
    """The ``tokenizers.Tokenizer`` inside mlx_lm's wrapper (or inside a transformers fast tokenizer)."""
    hf = getattr(tokenizer, "_tokenizer", tokenizer)
    found = getattr(hf, "backend_tokenizer", None) or hf
    if not isinstance(found, Tokenizer):
        raise InvalidRequest("this model's tokenizer cannot show token pieces")
    return found


class Vocabulary:
    """One model's tokenizer seen as llama-server's vocabulary: text <-> ids, and each id's bytes."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = backend(tokenizer)
        self.added = {i: t.content for i, t in self.tokenizer.get_added_tokens_decoder().items()}
        self.byte_level = isinstance(self.tokenizer.decoder, decoders.ByteLevel)
        self.size = self.tokenizer.get_vocab_size(with_added_tokens=True)
        self._lock = threading.Lock()
        self._plain: Tokenizer | None = None

    def piece(self, token: int) -> bytes:
        """The bytes token ``token`` stands for (special tokens as their text)."""
        if token in self.added:
            return self.added[token].encode()
        text = self.tokenizer.id_to_token(token)
        if text is None:
            raise InvalidRequest(f"invalid token id {token}")
        if self.byte_level:
            table = _byte_decoder()
            return b"".join(bytes([table[c]]) if c in table else c.encode() for c in text)
        match = _BYTE_TOKEN.fullmatch(text)
        if match:
            return bytes([int(match.group(1), 16)])
        return text.replace("\u2581", " ").encode()

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        """``text`` as ids; with ``parse_special`` off, special-token text is tokenized as plain text."""
        tokenizer = self.tokenizer if parse_special else self._plain_text()
        return child_tokenizer.encode(tokenizer, text, add_special=add_special)

    def _plain_text(self) -> Tokenizer:
        """A copy of the tokenizer that reads special-token text as plain text. A copy, because the switch is the
        tokenizer's own state, and tokenizing runs on several threads (the offload pool, the model worker)."""
        with self._lock:
            if self._plain is None:
                plain = Tokenizer.from_str(self.tokenizer.to_str())
                plain.encode_special_tokens = True
                self._plain = plain
            return self._plain

    def tokenize_mixed(self, content: str | list[Any], *, add_special: bool, parse_special: bool) -> list[int]:
        """A string, or an array mixing strings and token ids (b10621's ``tokenize_mixed``)."""
        if isinstance(content, str):
            return self.tokenize(content, add_special=add_special, parse_special=parse_special)
        out: list[int] = []
        for i, item in enumerate(content):
            if isinstance(item, str):
                out += self.tokenize(item, add_special=add_special and i == 0, parse_special=parse_special)
            else:
                out.append(self.check(item))
        return out

    def check(self, token: Any) -> int:
        """A token id from a request: an integer inside the vocabulary."""
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < self.size:
            raise InvalidRequest(f"invalid token id {token!r} (the vocabulary has {self.size} tokens)")
        return token

    def detokenize(self, tokens: list[int]) -> str:
        """Every token's piece, special ones included, joined (b10621's ``tokens_to_str``)."""
        return b"".join(self.piece(self.check(t)) for t in tokens).decode("utf-8", errors="replace")


_cache: dict[int, tuple[Any, Vocabulary]] = {}


def vocabulary(tokenizer: Any) -> Vocabulary:
    """The ``Vocabulary`` of a loaded tokenizer, built once per tokenizer object."""
    entry = _cache.get(id(tokenizer))
    if entry is None or entry[0] is not tokenizer:
        entry = (tokenizer, Vocabulary(tokenizer))
        _cache.clear()
        _cache[id(tokenizer)] = entry
    return entry[1]
