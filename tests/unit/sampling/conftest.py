"""A tiny stand-in vocabulary for sampling tests: fixed pieces, greedy longest-match encoding."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

PIECES = ["</s>", "a", "b", "c", "x", "y", ":", "\n", "hello", " world", "x:", '"', "*", "he", "llo", " "]


class TinyVocab:
    """Implements the SamplingVocab protocol over ``PIECES``; token 0 is the end-of-generation token."""

    def __init__(self, pieces: Sequence[str] = PIECES) -> None:
        self.pieces = list(pieces)
        self.eog_ids = (0,)

    @property
    def n_vocab(self) -> int:
        return len(self.pieces)

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        i = 0
        while i < len(text):
            best = max((t for t in range(1, len(self.pieces)) if text.startswith(self.pieces[t], i)),
                       key=lambda t: len(self.pieces[t]), default=None)
            if best is None:
                raise ValueError(f"cannot encode {text[i]!r}")
            out.append(best)
            i += len(self.pieces[best])
        return out

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.pieces[i] for i in ids)

    def id(self, piece: str) -> int:
        return self.pieces.index(piece)


@pytest.fixture
def vocab() -> TinyVocab:
    return TinyVocab()
