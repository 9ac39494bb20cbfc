"""Incremental detokenization: continuation spaces kept, split characters held back, same text as a whole decode."""

from __future__ import annotations

from typing import Any

from mlxd.engine.batching.detokenize import IncrementalDetokenizer, fast_decoder


def test_pieces_join_to_the_decoded_continuation(tiny_model: Any) -> None:
    tok = tiny_model.tokenizer
    decode = fast_decoder(tok)
    prompt = list(tok.encode("The quick brown"))
    rest = list(tok.encode("The quick brown fox jumps over the lazy dog, é à ü 日本語 ok"))[len(prompt):]
    detok = IncrementalDetokenizer(decode, prompt)
    pieces = [detok.add(t) for t in rest]
    whole = decode(prompt + rest)
    assert "".join(pieces) + detok.flush() == whole[len(decode(prompt)):]
    assert pieces[0].startswith(" ")  # " fox", as llama-server sends it
    assert all("\ufffd" not in p for p in pieces)


def test_a_split_character_waits_for_its_last_byte(tiny_model: Any) -> None:
    tok = tiny_model.tokenizer
    decode = fast_decoder(tok)
    ids = list(tok.encode("日本語"))
    detok = IncrementalDetokenizer(decode, [])
    pieces = [detok.add(t) for t in ids]
    assert "".join(pieces) == "日本語"
    if len(ids) > 3:  # byte-level pieces: at least one token completes no character on its own
        assert "" in pieces
