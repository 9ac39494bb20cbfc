"""Stop strings across token boundaries, and the n_indent rule."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mlxd.engine.batching.stops import IndentLimit, StopMatcher


def run(stops: list[str], chunks: list[str]) -> tuple[list[str], str | None]:
    m = StopMatcher(stops)
    emitted = []
    for chunk in chunks:
        text, stop = m.feed(chunk)
        emitted.append(text)
        if stop is not None:
            return emitted, stop
    emitted.append(m.flush())
    return emitted, None


def reference(stops: list[str], chunks: list[str]) -> tuple[str, str | None]:
    """Stop at the first chunk after which some stop string is complete; cut at the earliest one."""
    text = ""
    for chunk in chunks:
        text += chunk
        found = [(text.find(s), i, s) for i, s in enumerate(stops) if s and s in text]
        if found:
            pos, _, stop = min(found)
            return text[:pos], stop
    return text, None


def test_stop_split_across_tokens_is_withheld_then_dropped():
    emitted, stop = run(["</s>"], ["hello <", "/", "s", "> tail"])
    assert emitted == ["hello ", "", "", ""] and stop == "</s>"


def test_partial_match_that_fails_is_released():
    m = StopMatcher(["STOP"])
    assert m.feed("go ST") == ("go ", None)
    assert m.held == "ST"
    assert m.feed("ART") == ("START", None)


def test_earliest_complete_stop_wins():
    assert run(["world", "lo"], ["hello world"]) == (["hel"], "lo")
    assert run(["ab", "b"], ["ab"]) == ([""], "ab")


def test_flush_releases_held_text_at_the_end():
    assert run(["</s>"], ["done <"]) == (["done ", "<"], None)


def test_text_after_a_stop_is_dropped():
    m = StopMatcher(["x"])
    assert m.feed("axb") == ("a", "x")
    assert m.feed("more") == ("", "x")
    assert m.flush() == ""


@given(
    stops=st.lists(st.text(alphabet="abc", min_size=1, max_size=4), max_size=3),
    chunks=st.lists(st.text(alphabet="abcd", max_size=4), max_size=12),
)
def test_emitted_text_is_text_up_to_the_first_stop(stops, chunks):
    emitted, stop = run(stops, chunks)
    want_text, want_stop = reference(stops, chunks)
    assert "".join(emitted) == want_text
    assert stop == want_stop


@given(stops=st.lists(st.text(alphabet="ab", min_size=2, max_size=4), min_size=1, max_size=2),
       chunks=st.lists(st.text(alphabet="ab", max_size=3), max_size=10))
def test_nothing_emitted_could_still_start_a_stop(stops, chunks):
    m = StopMatcher(stops)
    sent = fed = ""
    for chunk in chunks:
        fed += chunk
        text, stop = m.feed(chunk)
        sent += text
        if stop is not None:
            break
        assert sent + m.held == fed
        # no stop string can begin inside the emitted text any more
        assert not any(s.startswith(fed[i:]) for s in stops for i in range(len(sent)))


def test_indent_limit_cuts_an_under_indented_line():
    rule = IndentLimit(2)
    text = ""
    cut = None
    for piece in ["def f():", "\n", "  x = 1", "\n", "y"]:
        text += piece
        cut = rule.check(text, piece)
        if cut is not None:
            break
    assert cut == len("def f():\n  x = 1\n")


def test_indent_limit_off_by_default():
    rule = IndentLimit(0)
    assert rule.check("a\nb", "\n") is None and rule.check("a\nbc", "c") is None
