"""Splitting <think> reasoning from content, whole and streamed, for every --reasoning-format."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlxd.engine.chat import ReasoningFormat, ReasoningStream, check_reasoning_format, split_reasoning

FORMATS: list[ReasoningFormat] = ["none", "deepseek", "deepseek-legacy", "auto"]


@pytest.mark.parametrize(("text", "starts", "expected"), [
    ("<think>\nplan\n</think>\n\nAnswer", False, ("plan", "Answer")),
    ("  \n<think>a b</think>c", False, ("a b", "c")),
    ("<think>\n\n</think>\n\nAnswer", False, ("", "Answer")),
    ("<think>still thinking  ", False, ("still thinking", "")),
    ("Answer <think>x</think>", False, ("", "Answer <think>x</think>")),
    ("plain", False, ("", "plain")),
    ("  plain ", False, ("", "  plain ")),
    ("<thi", False, ("", "<thi")),
    ("plan\n</think>\nAnswer", True, ("plan", "Answer")),
    ("plan only", True, ("plan only", "")),
    ("a</think>b</think>c", True, ("a", "b</think>c")),
    ("<think>x</think>   ", False, ("x", "")),
])
def test_deepseek_split(text: str, starts: bool, expected: tuple[str, str]) -> None:
    assert split_reasoning(text, reasoning_format="deepseek", starts_in_reasoning=starts) == expected
    assert split_reasoning(text, reasoning_format="auto", starts_in_reasoning=starts) == expected


def test_none_keeps_everything_in_content() -> None:
    assert split_reasoning("<think>x</think>y", reasoning_format="none") == ("", "<think>x</think>y")
    assert split_reasoning("x</think>y", reasoning_format="none", starts_in_reasoning=True) == ("", "x</think>y")


def test_legacy_fills_reasoning_and_keeps_tags_in_content() -> None:
    assert split_reasoning("<think>x</think>y", reasoning_format="deepseek-legacy") == ("x", "<think>x</think>y")
    assert split_reasoning("x</think>y", reasoning_format="deepseek-legacy", starts_in_reasoning=True) == (
        "x", "<think>x</think>y")


def test_unknown_format_is_refused() -> None:
    assert check_reasoning_format("deepseek-legacy") == "deepseek-legacy"
    with pytest.raises(Exception, match="Unknown reasoning format: r1"):
        check_reasoning_format("r1")


def test_partial_tags_are_withheld_until_decided() -> None:
    stream = ReasoningStream("deepseek")
    assert stream.feed("<thi") == ("", "")
    assert not stream.in_reasoning
    assert stream.feed("nk>\nidea") == ("idea", "")
    assert stream.in_reasoning
    assert stream.feed(" </thi") == ("", "")
    assert stream.feed("nk>") == ("", "")
    assert not stream.in_reasoning
    assert stream.feed("\n\nDone") == ("", "Done")
    assert stream.finish() == ("", "")


def test_content_that_only_looks_like_a_tag_is_released() -> None:
    stream = ReasoningStream("deepseek")
    assert stream.feed("<th") == ("", "")
    assert stream.feed("ere") == ("", "<there")


def test_starts_in_reasoning_and_budget_detection() -> None:
    stream = ReasoningStream("deepseek", starts_in_reasoning=True)
    assert stream.in_reasoning
    assert stream.feed("step one") == ("step one", "")
    stream.feed("</think>")
    assert not stream.in_reasoning
    tracked = ReasoningStream("none")
    tracked.feed("<think>x")
    assert tracked.in_reasoning  # counted for --reasoning-budget even when nothing is extracted


def test_legacy_stream_prefixes_the_prompt_opened_tag() -> None:
    stream = ReasoningStream("deepseek-legacy", starts_in_reasoning=True)
    assert stream.feed("x") == ("x", "<think>x")
    assert stream.feed("</think>y") == ("", "</think>y")


def _stream(fmt: ReasoningFormat, starts: bool, pieces: list[str]) -> tuple[str, str]:
    stream = ReasoningStream(fmt, starts_in_reasoning=starts)
    reasoning, content = [], []
    for piece in pieces:
        r, c = stream.feed(piece)
        reasoning.append(r)
        content.append(c)
    r, c = stream.finish()
    return "".join(reasoning) + r, "".join(content) + c


FRAGMENTS = st.sampled_from(["<think>", "</think>", "<thi", "</th", "nk>", "<", "/", ">", " ", "\n", "\t", "a",
                             "b c", "think", "é"])
TEXTS = st.lists(FRAGMENTS, max_size=14).map("".join)


def _cuts(text: str, points: list[int]) -> list[str]:
    bounds = sorted({min(p, len(text)) for p in points})
    pieces, last = [], 0
    for bound in bounds + [len(text)]:
        pieces.append(text[last:bound])
        last = bound
    return pieces


@settings(max_examples=400, derandomize=True, deadline=None)
@given(text=TEXTS, points=st.lists(st.integers(0, 120), max_size=10), fmt=st.sampled_from(FORMATS),
       starts=st.booleans())
def test_any_split_streams_to_the_whole_split(text: str, points: list[int], fmt: ReasoningFormat,
                                              starts: bool) -> None:
    expected = split_reasoning(text, reasoning_format=fmt, starts_in_reasoning=starts)
    assert _stream(fmt, starts, _cuts(text, points)) == expected
    assert _stream(fmt, starts, list(text)) == expected


CONTINUATIONS = ["", "</think>", "ink>", "nk>x", "k>", ">", " ", "\n", "x", "<think>"]


@settings(max_examples=200, derandomize=True, deadline=None)
@given(text=TEXTS, fmt=st.sampled_from(["deepseek", "deepseek-legacy"]), starts=st.booleans())
def test_nothing_shown_is_ever_contradicted_by_what_follows(text: str, fmt: ReasoningFormat, starts: bool) -> None:
    stream = ReasoningStream(fmt, starts_in_reasoning=starts)
    shown_reasoning, shown_content = "", ""
    for at, char in enumerate(text, start=1):
        reasoning, content = stream.feed(char)
        shown_reasoning += reasoning
        shown_content += content
        for continuation in CONTINUATIONS:
            final_reasoning, final_content = split_reasoning(
                text[:at] + continuation, reasoning_format=fmt, starts_in_reasoning=starts)
            assert final_reasoning.startswith(shown_reasoning)
            assert final_content.startswith(shown_content)
