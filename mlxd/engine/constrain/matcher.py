"""Per-request matcher state and the batched mask: which tokens may come next, and when the grammar is done.

The worker's step is: ``apply_masks(logits, matchers)`` before sampling, then ``matcher.consume(token)`` on each
constrained row. ``apply_masks`` computes every constrained row's mask in one llguidance call, on its own thread
pool with the GIL released; when the worker has already started the forward pass (``mx.async_eval(logits)``),
that work overlaps with it. A Python thread per request was measured slower: the GIL hand-offs cost more than
the few microseconds a mask takes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import llguidance
import mlx.core as mx
import numpy as np

from mlxd.engine.constrain.compile import CompiledConstraint
from mlxd.engine.constrain.errors import ConstraintError
from mlxd.engine.constrain.spec import TriggerType
from mlxd.engine.constrain.tokenizer import ConstraintTokenizer

_EXECUTOR: llguidance.LLExecutor | None = None


def _executor() -> llguidance.LLExecutor:
    global _EXECUTOR
    if _EXECUTOR is None:
        _EXECUTOR = llguidance.LLExecutor()
    return _EXECUTOR


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
        self._row_fresh = False  # whether _row holds the mask for the current state
        self._triggers = _Triggers(compiled) if compiled.spec.lazy else None
        self._buffer = b""  # generated text while a lazy grammar waits for its trigger
        self.finished = False

    @property
    def active(self) -> bool:
        """Whether the grammar constrains the next token (a lazy one only after its trigger)."""
        return self._triggers is None and not self.finished

    def mask_row(self) -> np.ndarray | None:
        """The next token's allowed-set bitmask (int32 words, bit i = token i), or None when unconstrained."""
        if not self.active:
            return None
        if not self._row_fresh:
            self._ll.unsafe_compute_mask_ptr(self._row.ctypes.data, self._row.nbytes)
            self._row_fresh = True
        return self._row

    def consume(self, token: int) -> bool:
        """Advance on the sampled token; True when the grammar is complete and the generation must end."""
        if self.finished:
            return True
        if self._triggers is not None:
            return self._consume_waiting(token)
        if self._ll.validate_tokens([token]) == 1:
            self._ll.consume_token(token)
        else:
            # llguidance's mask lets an added token stand for its text (``<tool_call>`` for the string
            # "<tool_call>") but its parser reads the token as special; the text itself is what was meant.
            self._feed(self._tokenizer.token_bytes(token), f"token {token}")
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
        self._replay(constrained)
        return self._after_advance()

    def _replay(self, text: bytes) -> None:
        """Feed the trigger's text to the grammar from where the trigger starts."""
        self._feed(text, "the text that triggered the lazy grammar")

    def _feed(self, text: bytes, what: str) -> None:
        """Advance over ``text``, which the grammar reads as bytes: any tokenization of it will do.

        A grammar may name a marker as its special token (``<tool_call>`` in Lark) or spell it as a string
        (``"<tool_call>"``, as llama.cpp's GBNF matches token pieces); whichever reading it accepts is used.
        """
        ll = self._tokenizer.ll
        readings = (ll.tokenize_bytes(text, parse_special=True), ll.greedy_tokenize(text.decode("utf-8", "replace")))
        for tokens in readings:
            if tokens and self._ll.validate_tokens(tokens) == len(tokens):
                self._ll.consume_tokens(tokens)
                return
        raise ConstraintError(f"{what} does not match the grammar: {text.decode('utf-8', 'replace')!r}")

    def _after_advance(self) -> bool:
        self._row_fresh = False
        if self._ll.is_stopped():
            self.finished = True
            return True
        return False


def _fill_rows(matchers: list[Matcher]) -> None:
    """Bring every matcher's row up to date, in one parallel llguidance call when there are several."""
    stale = [m for m in matchers if not m._row_fresh]
    if len(stale) == 1:
        stale[0].mask_row()
    elif stale:
        words = stale[0]._row.shape[0]
        block = np.zeros((len(stale), words), dtype=np.int32)
        jobs = [(m._ll, i) for i, m in enumerate(stale)]
        _executor().unsafe_compute_mask_ptr(jobs, block.ctypes.data, words * 4, len(stale))
        for m, row in zip(stale, block, strict=True):
            m._row[:] = row
            m._row_fresh = True


def batch_mask(matchers: Sequence[Matcher | None], n_vocab: int) -> np.ndarray | None:
    """One [B, ceil(n_vocab/32)] int32 bitmask for a batch, or None when no row is constrained.

    Unconstrained rows allow everything; a constrained row allows nothing past its tokenizer's vocabulary.
    """
    active = [m for m in matchers if m is not None and m.active]
    if not active:
        return None
    _fill_rows(active)
    words = (n_vocab + 31) // 32
    mask = np.full((len(matchers), words), -1, dtype=np.int32)
    for i, matcher in enumerate(matchers):
        row = matcher.mask_row() if matcher is not None else None
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
