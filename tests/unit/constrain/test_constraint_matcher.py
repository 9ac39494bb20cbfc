"""The per-request matcher and the batched mask, driven by scripted tokens and random logits (no model)."""

from __future__ import annotations

import re

import mlx.core as mx
import numpy as np
import pytest

from mlxd.engine.constrain import (
    ConstraintCompiler,
    ConstraintError,
    ConstraintSpec,
    ConstraintTokenizer,
    Matcher,
    Trigger,
    TriggerType,
    apply_masks,
    batch_mask,
)

BRACED = 'root ::= "{" [a-z]{1,4} "}"'
YES_NO = ConstraintSpec("gbnf", 'root ::= "yes" | "no"', origin="grammar")


def _allowed(ctok: ConstraintTokenizer, matcher: Matcher) -> set[int]:
    mask = batch_mask([matcher], ctok.n_vocab)
    assert mask is not None
    bits = np.unpackbits(mask.view(np.uint8), axis=1, bitorder="little")[0, : ctok.n_vocab]
    return {int(i) for i in np.flatnonzero(bits)}


def _tokens(ctok: ConstraintTokenizer, text: str) -> list[int]:
    return ctok.ll.tokenize_str(text, parse_special=True)


def test_the_mask_allows_exactly_the_tokens_that_extend_the_grammar(
    ctok: ConstraintTokenizer, ccompiler: ConstraintCompiler
) -> None:
    matcher = Matcher(ccompiler.compile(YES_NO), ctok)
    allowed = _allowed(ctok, matcher)
    texts = {ctok.token_bytes(t) for t in allowed}
    assert texts and all(b"yes".startswith(t) or b"no".startswith(t) for t in texts)
    assert ctok.single_token("yes") in allowed or b"y" in texts


def test_the_grammar_end_ends_the_generation(ctok: ConstraintTokenizer, ccompiler: ConstraintCompiler) -> None:
    matcher = Matcher(ccompiler.compile(YES_NO), ctok)
    tokens = _tokens(ctok, "no")
    results = [matcher.consume(t) for t in tokens]
    assert results == [False] * (len(tokens) - 1) + [True]
    assert matcher.finished and matcher.mask_row() is None


def test_an_accepting_grammar_allows_eos_and_ends_on_it(
    ctok: ConstraintTokenizer, ccompiler: ConstraintCompiler
) -> None:
    matcher = Matcher(ccompiler.compile(ConstraintSpec("gbnf", "root ::= [a-z]+", origin="grammar")), ctok)
    assert matcher.consume(_tokens(ctok, "abc")[0]) is False
    eos = ctok.eos_token_ids[0]
    assert eos in _allowed(ctok, matcher)
    assert matcher.consume(eos) is True


def test_padding_past_the_tokenizer_is_forbidden_to_constrained_rows_only(
    ctok: ConstraintTokenizer, ccompiler: ConstraintCompiler
) -> None:
    # The output layer (2100 rows here) is wider than the tokenizer (2048 tokens).
    matcher = Matcher(ccompiler.compile(ConstraintSpec("gbnf", "root ::= [^\"]+", origin="grammar")), ctok)
    logits = mx.zeros((2, ctok.n_vocab))
    masked = np.array(apply_masks(logits, [matcher, None]))
    assert np.isneginf(masked[0, ctok.ll.vocab_size - 20 :]).any()
    assert np.isneginf(masked[0, 2048:]).all()
    assert (masked[1] == 0).all()


def test_unconstrained_batches_are_passed_through_untouched(ctok: ConstraintTokenizer) -> None:
    logits = mx.random.normal((3, ctok.n_vocab))
    assert apply_masks(logits, [None, None, None]) is logits


def test_greedy_decoding_over_random_logits_yields_grammar_output(
    ctok: ConstraintTokenizer, ccompiler: ConstraintCompiler
) -> None:
    spec = ConstraintSpec("gbnf", 'root ::= "[" [0-9]{1,3} ("," [0-9]{1,3}){0,4} "]"', origin="grammar")
    for seed in range(5):
        rng = np.random.default_rng(seed)
        matcher, out = Matcher(ccompiler.compile(spec), ctok), []
        for _ in range(64):
            logits = mx.array(rng.normal(size=(1, ctok.n_vocab)).astype(np.float32))
            token = int(mx.argmax(apply_masks(logits, [matcher]), axis=-1).item())
            out.append(token)
            if matcher.consume(token):
                break
        text = ctok.ll.decode_str(out)
        assert matcher.finished and text.startswith("[") and text.endswith("]")
        assert all(part.isdigit() and len(part) <= 3 for part in text[1:-1].split(","))


def _lazy(
    ccompiler: ConstraintCompiler, ctok: ConstraintTokenizer, *triggers: Trigger, grammar: str = BRACED
) -> Matcher:
    spec = ConstraintSpec("gbnf", grammar, origin="grammar", lazy=True, triggers=triggers)
    return Matcher(ccompiler.compile(spec), ctok)


def test_a_lazy_grammar_is_free_until_its_word_and_then_replays_from_it(
    ctok: ConstraintTokenizer, ccompiler: ConstraintCompiler
) -> None:
    matcher = _lazy(ccompiler, ctok, Trigger(TriggerType.WORD, "{"))
    for token in _tokens(ctok, "some text, then "):
        assert matcher.mask_row() is None  # nothing constrained before the trigger
        assert matcher.consume(token) is False
    for token in _tokens(ctok, "{ab"):
        assert matcher.consume(token) is False
    assert matcher.mask_row() is not None
    firsts = {ctok.token_bytes(t)[:1] for t in _allowed(ctok, matcher)}
    assert firsts and firsts <= set(re.findall(b".", b"abcdefghijklmnopqrstuvwxyz}"))
    assert matcher.consume(_tokens(ctok, "}")[0]) is True


def test_a_full_pattern_trigger_must_match_the_whole_text(
    ctok: ConstraintTokenizer, ccompiler: ConstraintCompiler
) -> None:
    matcher = _lazy(ccompiler, ctok, Trigger(TriggerType.PATTERN_FULL, r"\s*(\{)"))
    assert matcher.consume(_tokens(ctok, "x")[0]) is False  # "x{" would never match the anchored pattern
    fresh = _lazy(ccompiler, ctok, Trigger(TriggerType.PATTERN_FULL, r"\s*(\{)"))
    for token in _tokens(ctok, "  {"):
        fresh.consume(token)
    assert fresh.active


@pytest.mark.parametrize("marker", ['"<tool_call>"', "<tool_call>"])
def test_a_token_trigger_starts_the_grammar_with_that_token(
    ctok: ConstraintTokenizer, ccompiler: ConstraintCompiler, marker: str
) -> None:
    # GBNF spells the marker as text (llama.cpp matches token pieces); Lark can name the token itself.
    open_ = ctok.single_token("<tool_call>")
    trigger = Trigger(TriggerType.TOKEN, "<tool_call>", open_)
    spec = ConstraintSpec("lark", f'start: {marker} "x"', origin="grammar", lazy=True, triggers=(trigger,))
    matcher = Matcher(ccompiler.compile(spec), ctok)
    assert matcher.consume(_tokens(ctok, "hello")[0]) is False and not matcher.active
    assert matcher.consume(open_) is False and matcher.active
    assert matcher.consume(_tokens(ctok, "x")[0]) is True


def test_trigger_text_the_grammar_rejects_fails_the_request(
    ctok: ConstraintTokenizer, ccompiler: ConstraintCompiler
) -> None:
    matcher = _lazy(ccompiler, ctok, Trigger(TriggerType.WORD, "{"))
    with pytest.raises(ConstraintError, match="does not match the grammar"):
        for token in _tokens(ctok, "{0"):
            matcher.consume(token)


def test_an_invalid_trigger_pattern_is_refused(ctok: ConstraintTokenizer, ccompiler: ConstraintCompiler) -> None:
    with pytest.raises(ConstraintError, match="invalid pattern"):
        _lazy(ccompiler, ctok, Trigger(TriggerType.PATTERN, "("))


def test_an_added_token_the_mask_allows_for_its_text_is_consumed_as_that_text(
    ctok: ConstraintTokenizer, ccompiler: ConstraintCompiler
) -> None:
    spec = ConstraintSpec("gbnf", 'root ::= "<tool_call>" "x"', origin="grammar")
    matcher = Matcher(ccompiler.compile(spec), ctok)
    open_ = ctok.single_token("<tool_call>")
    assert open_ in _allowed(ctok, matcher)
    assert matcher.consume(open_) is False
    assert matcher.consume(_tokens(ctok, "x")[0]) is True
