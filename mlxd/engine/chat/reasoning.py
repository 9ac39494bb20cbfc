"""Splitting ``<think>`` reasoning from an answer, whole or as it streams (``--reasoning-format``).

The rules, for ``deepseek`` (and ``auto``, which means the same here):

* Reasoning is recognised only at the start of the answer: optional whitespace, then ``<think>``; or from the very
  first character when the prompt itself left ``<think>`` open. A ``<think>`` later in the answer is content.
* Reasoning runs to the first ``</think>`` (or to the end of the text) and is stripped of surrounding whitespace;
  whitespace right after ``</think>`` is dropped.

``deepseek-legacy`` fills ``reasoning_content`` the same way and keeps the raw text, tags included, as content (with
the ``<think>`` the prompt opened put back in front). ``none`` leaves everything in content.

The streaming parser emits exactly what the whole-text split gives, however the text is cut into deltas: it holds
back a possible partial tag and whitespace whose fate is not yet known, never emits and then retracts.
"""

from __future__ import annotations

from typing import Literal, get_args

from mlxd.engine.chat.errors import ChatRequestError

ReasoningFormat = Literal["none", "deepseek", "deepseek-legacy", "auto"]

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
# The whitespace llama.cpp's parser skips (C isspace), not Python's wider Unicode notion.
WHITESPACE = " \t\n\r\f\v"


def check_reasoning_format(value: str) -> ReasoningFormat:
    """Validate a ``reasoning_format`` name with llama-server's wording."""
    if value not in get_args(ReasoningFormat):
        raise ChatRequestError(f"Unknown reasoning format: {value}")
    return value  # type: ignore[return-value]


def _extracts(fmt: ReasoningFormat) -> bool:
    return fmt in ("deepseek", "auto")


Tags = tuple[str, str]  # a family's reasoning block: <think>...</think>, <seed:think>..., <|START_THINKING|>...
THINK_TAGS: Tags = (THINK_OPEN, THINK_CLOSE)


def split_reasoning(
    text: str, *, reasoning_format: ReasoningFormat = "deepseek", starts_in_reasoning: bool = False,
    tags: Tags = THINK_TAGS,
) -> tuple[str, str]:
    """``(reasoning_content, content)`` of a whole generated text."""
    think_open, think_close = tags
    if reasoning_format == "none":
        return "", text
    body: str | None = None
    if starts_in_reasoning:
        body = text
    else:
        opening = text.lstrip(WHITESPACE)
        if opening.startswith(think_open):
            body = opening[len(think_open):]
    if body is None:
        return "", text
    end = body.find(think_close)
    if end < 0:
        reasoning, content = body, ""
    else:
        reasoning, content = body[:end], body[end + len(think_close):].lstrip(WHITESPACE)
    reasoning = reasoning.strip(WHITESPACE)
    if _extracts(reasoning_format):
        return reasoning, content
    return reasoning, (think_open + text if starts_in_reasoning else text)


def partial_tag_suffix(text: str, tag: str) -> int:
    """Length of the longest end of ``text`` that is a proper beginning of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class ReasoningStream:
    """Feed generated text deltas; get ``(reasoning_delta, content_delta)`` pairs back.

    ``in_reasoning`` says whether the text fed so far ends inside a reasoning block, whatever the format: it is
    what ``--reasoning-budget`` counts against.
    """

    # States of the tag machine: deciding whether the answer opens with <think>, inside reasoning, skipping the
    # whitespace after </think>, and plain content from then on.
    _START, _REASONING, _AFTER, _CONTENT = range(4)

    def __init__(self, reasoning_format: ReasoningFormat = "deepseek", *, starts_in_reasoning: bool = False,
                 tags: Tags = THINK_TAGS) -> None:
        self.reasoning_format = reasoning_format
        self._open, self._close = tags
        self._state = self._REASONING if starts_in_reasoning else self._START
        self._held = ""  # text whose role is not decided yet
        self._started = False  # a non-whitespace reasoning character has been emitted
        self._raw_prefix = self._open if starts_in_reasoning else ""

    @property
    def in_reasoning(self) -> bool:
        return self._state == self._REASONING

    def feed(self, delta: str) -> tuple[str, str]:
        """Consume one delta; return what can be shown now."""
        reasoning, content = self._advance(delta, final=False)
        return self._shape(delta, reasoning, content)

    def finish(self) -> tuple[str, str]:
        """The end of generation: release whatever was held back."""
        reasoning, content = self._advance("", final=True)
        return self._shape("", reasoning, content)

    def _shape(self, raw: str, reasoning: str, content: str) -> tuple[str, str]:
        fmt = self.reasoning_format
        if _extracts(fmt):
            return reasoning, content
        if fmt == "none":
            return "", raw
        prefix, self._raw_prefix = self._raw_prefix, ""
        return reasoning, prefix + raw

    def _advance(self, delta: str, *, final: bool) -> tuple[str, str]:
        text = self._held + delta
        self._held = ""
        reasoning: list[str] = []
        content: list[str] = []
        while True:
            if self._state == self._START:
                opening = text.lstrip(WHITESPACE)
                if opening.startswith(self._open):
                    self._state, text = self._REASONING, opening[len(self._open):]
                    continue
                if not final and self._open.startswith(opening):
                    self._held = text  # only whitespace and maybe the start of <think> so far
                    break
                self._state = self._CONTENT
                continue
            if self._state == self._REASONING:
                end = text.find(self._close)
                if end >= 0:
                    reasoning.append(self._reasoning_piece(text[:end].rstrip(WHITESPACE)))
                    self._state, text = self._AFTER, text[end + len(self._close):]
                    continue
                if final:
                    reasoning.append(self._reasoning_piece(text.rstrip(WHITESPACE)))
                    break
                cut = len(text) - partial_tag_suffix(text, self._close)
                shown = text[:cut].rstrip(WHITESPACE)
                self._held = text[len(shown):]
                reasoning.append(self._reasoning_piece(shown))
                break
            if self._state == self._AFTER:
                text = text.lstrip(WHITESPACE)
                if not text:
                    break
                self._state = self._CONTENT
                continue
            content.append(text)
            break
        return "".join(reasoning), "".join(content)

    def _reasoning_piece(self, piece: str) -> str:
        if not self._started:
            piece = piece.lstrip(WHITESPACE)
            self._started = bool(piece)
        return piece
