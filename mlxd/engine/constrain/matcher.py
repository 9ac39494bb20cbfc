"""Per-request matcher state and the batched mask: which tokens may come next, and when the grammar is done.

The worker's step is: ``apply_masks(logits, matchers)`` before sampling, then ``matcher.consume(token)`` on each
constrained row. ``consume`` starts computing the next step's mask on a background thread right away
(llguidance releases the GIL while it works), so the mask is built while the model runs its next forward pass
and ``apply_masks`` usually finds it ready.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import llguidance
import mlx.core as mx
import numpy as np

from mlxd.engine.constrain.compile import CompiledConstraint
from mlxd.engine.constrain.errors import ConstraintError
from mlxd.engine.constrain.spec import TriggerType
from mlxd.engine.constrain.tokenizer import ConstraintTokenizer

_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="mlxd-mask")


class _Triggers:
    """A lazy grammar's wake-up conditions, compiled as llama.cpp compiles them (common/sampling.cpp)."""

    def __init__(self, compiled: CompiledConstraint) -> None:
        self.tokens: set[int] = set()
        anywhere: list[str] = []
        self.patterns: list[re.Pattern[str]] = []
        for trigger in compiled.spec.triggers:
            if trigger.type is TriggerType.TOKEN and trigger.token is not None:
                self.tokens.add(trigger.token)
            elif trigger.type is TriggerType.WORD:
                anywhere.append(re.escape(trigger.value))
            elif trigger.type is TriggerType.PATTERN:
                anywhere.append(trigger.value)
            elif trigger.type is TriggerType.PATTERN_FULL:
                value = trigger.value
                self.patterns.append(_compile_pattern(("" if value.startswith("^") else "^") + value))
        if anywhere:
            # The grammar starts at the first capture group: the earliest trigger, not the text before it.
            self.patterns.append(_compile_pattern(r"[\s\S]*?(" + "|".join(anywhere) + r")[\s\S]*"))

    def start(self, buffer: str) -> int | None:
        """Where the constrained text starts in ``buffer`` if a pattern matches it whole, else None."""
        for pattern in self.patterns:
            found = pattern.fullmatch(buffer)
            if found is None:
                continue
            for group in range(1, (found.lastindex or 0) + 1):
                if found.group(group):
                    return found.start(group)
            return 0
        return None


def _compile_pattern(source: str) -> re.Pattern[str]:
    try:
        return re.compile(source)
    except re.error as exc:
        raise ConstraintError(f"grammar_triggers: invalid pattern {source!r}: {exc}") from exc


class Matcher:
    """One request's constraint state. Not thread-safe: the worker thread alone calls ``consume``."""

    def __init__(self, compiled: CompiledConstraint, tokenizer: ConstraintTokenizer) -> None:
        self._tokenizer = tokenizer
        self._ll: llguidance.LLMatcher = compiled.new_matcher()
        self._row = np.zeros(tokenizer.mask_words, dtype=np.int32)
        self._pending: Future[None] | None = None
        self._triggers = _Triggers(compiled) if compiled.spec.lazy else None
        self._buffer = b""  # generated text while a lazy grammar waits for its trigger
        self.finished = False
        if self._triggers is None:
            self._schedule_mask()

    @property
    def active(self) -> bool:
        """Whether the grammar constrains the next token (a lazy one only after its trigger)."""
        return self._triggers is None and not self.finished

    def mask_row(self) -> np.ndarray | None:
        """The next token's allowed-set bitmask (int32 words, bit i = token i), or None when unconstrained."""
        if not self.active:
            return None
        if self._pending is not None:
            self._pending.result()
            self._pending = None
        return self._row

    def consume(self, token: int) -> bool:
        """Advance on the sampled token; True when the grammar is complete and the generation must end."""
        if self.finished:
            return True
        if self._triggers is not None:
            return self._consume_waiting(token)
        if self._pending is not None:
            self._pending.result()
            self._pending = None
        if not self._ll.consume_token(token):
            raise ConstraintError(f"the constraint rejected token {token}: {self._ll.get_error()}")
        return self._after_advance()

    def _consume_waiting(self, token: int) -> bool:
        assert self._triggers is not None
        piece = self._tokenizer.token_bytes(token)
        self._buffer += piece
        if token in self._triggers.tokens:
            constrained = piece
        else:
            start = self._triggers.start(self._buffer.decode("utf-8", errors="replace"))
            if start is None:
                return False
            text = self._buffer.decode("utf-8", errors="replace")
            constrained = text[start:].encode("utf-8")
        self._triggers = None
        self._buffer = b""
        # The grammar reads bytes, so any tokenization of the replayed text is as good as the one sampled.
        tokens = self._tokenizer.ll.tokenize_bytes(constrained, parse_special=True)
        if not self._ll.consume_tokens(tokens):
            raise ConstraintError(
                f"the text that triggered the lazy grammar does not match it: {constrained!r}: {self._ll.get_error()}"
            )
        return self._after_advance()

    def _after_advance(self) -> bool:
        if self._ll.is_stopped():
            self.finished = True
            return True
        self._schedule_mask()
        return False

    def _schedule_mask(self) -> None:
        self._pending = _POOL.submit(self._fill_row)

    def _fill_row(self) -> None:
        self._ll.unsafe_compute_mask_ptr(self._row.ctypes.data, self._row.nbytes)

    def close(self) -> None:
        """Wait for a mask still being computed, so nothing runs on the matcher after its request is gone."""
        if self._pending is not None:
            self._pending.result()
            self._pending = None


def batch_mask(matchers: Sequence[Matcher | None], n_vocab: int) -> np.ndarray | None:
    """One [B, ceil(n_vocab/32)] int32 bitmask for a batch, or None when no row is constrained.

    Unconstrained rows allow everything; a constrained row allows nothing past its tokenizer's vocabulary.
    """
    rows = [m.mask_row() if m is not None else None for m in matchers]
    if all(row is None for row in rows):
        return None
    words = (n_vocab + 31) // 32
    mask = np.full((len(rows), words), -1, dtype=np.int32)
    for i, row in enumerate(rows):
        if row is not None:
            width = min(words, row.shape[0])
            mask[i, :width] = row[:width]
            mask[i, width:] = 0
    return mask


def _unpack(mask: np.ndarray, n_vocab: int) -> np.ndarray:
    bits = np.unpackbits(mask.view(np.uint8), axis=1, bitorder="little")
    return bits[:, :n_vocab].view(np.bool_)


def apply_masks(logits: mx.array, matchers: Sequence[Matcher | None]) -> mx.array:
    """``logits`` [B, V] with every token a row's constraint forbids set to -inf; unconstrained rows untouched."""
    n_vocab = logits.shape[-1]
    mask = batch_mask(matchers, n_vocab)
    if mask is None:
        return logits
    allowed = mx.array(_unpack(mask, n_vocab))
    return mx.where(allowed, logits, mx.array(-np.inf, dtype=logits.dtype))
