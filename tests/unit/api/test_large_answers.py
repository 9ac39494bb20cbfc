"""/tokenize's long answers are built in parts off the event loop (mlxd.api.large_body, issue 28): the parts must
join to the very bytes the one-call encoding of the whole answer gave before."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlx_lm.utils import load_tokenizer

from mlxd.api.errors import dumps
from mlxd.api.large_body import long_list_parts, release_list
from mlxd.api.pieces import vocabulary
from mlxd.api.routes.tokenize import _piece, _with_pieces


@pytest.mark.parametrize("chunk", [1, 3, 8192])
def test_pieces_in_parts_are_the_whole_answer_byte_for_byte(tiny_checkpoint: Path, chunk: int) -> None:
    vocab = vocabulary(load_tokenizer(tiny_checkpoint))
    ids = vocab.tokenize("naïve café, 東京 \"quoted\" \\ tab\t<|im_end|>", add_special=True, parse_special=True)
    ids += list(range(vocab.size)) + ids  # every token: byte pieces that are not UTF-8 too, and repeats
    before = dumps({"tokens": [{"id": t, "piece": _piece(vocab.piece(t))} for t in ids]}).encode()
    assert any(isinstance(_piece(vocab.piece(t)), list) for t in ids)  # the list-of-bytes shape is covered
    assert b"".join(_with_pieces(vocab, ids, chunk)) == before
    assert b"".join(_with_pieces(vocab, [], chunk)) == dumps({"tokens": []}).encode()


def test_a_long_list_in_parts_is_the_whole_list() -> None:
    ids = list(range(20000))
    assert b"".join(long_list_parts('{"tokens":', ids, "}", chunk=7)) == dumps({"tokens": ids}).encode()


def test_release_list_empties_the_list() -> None:
    items = list(range(100_003))
    release_list(items, chunk=1000)
    assert items == []
