"""Test helpers: the calls a client assembles from streamed deltas, and how they relate to the whole parse."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from mlxd.engine.chat import ToolCallDelta


def assemble(deltas: Iterable[ToolCallDelta]) -> list[tuple[str, str, str]]:
    """``(id, name, arguments)`` per call, as an OpenAI client joins the deltas: indices in order, id and name on
    the first delta of each call only, the arguments of all its deltas concatenated."""
    calls: list[list[str]] = []
    for delta in deltas:
        if delta.id:
            assert delta.index == len(calls) and delta.name
            calls.append([delta.id, delta.name, delta.arguments])
        else:
            assert delta.index < len(calls) and not delta.name and delta.arguments
            calls[delta.index][2] += delta.arguments
    return [(i, n, a) for i, n, a in calls]


def holds_in_order(whole: Sequence[tuple[str, str]], streamed: Sequence[tuple[str, str]]) -> bool:
    """Whether the whole parse's calls are among the streamed ones, in order: a stream may also hold a call it
    announced from a region that turned out not to be calls (a stream cannot take it back)."""
    rest = iter(streamed)
    return all(any(call == other for other in rest) for call in whole)
