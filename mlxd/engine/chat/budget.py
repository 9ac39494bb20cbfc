"""``--reasoning-budget``: count the tokens spent inside ``<think>`` and say when to force its end.

This mirrors llama.cpp's reasoning-budget sampler on text instead of token ids: a budget window opens when
reasoning starts (a ``<think>`` tag anywhere, or the first token when the prompt left it open), every later token
inside reasoning spends one, and when none is left the worker forces ``message + "</think>"`` into the sequence. A
new ``<think>`` after that opens a fresh window. The worker owns the tokens; this object only watches their text.
"""

from __future__ import annotations

from mlxd.engine.chat.reasoning import THINK_CLOSE, THINK_OPEN


class ReasoningBudget:
    """Per-request budget state. ``budget < 0`` is unrestricted; ``0`` ends reasoning as soon as it starts.

    Before sampling each token call :meth:`forced_text`; after each token, sampled or forced, call :meth:`accept`
    with its text.
    """

    def __init__(self, budget: int, *, starts_in_reasoning: bool = False, message: str = "",
                 start_tag: str = THINK_OPEN, end_tags: tuple[str, ...] = (THINK_CLOSE,)) -> None:
        self.budget = budget
        self.message = message
        self.start_tag = start_tag
        self.end_tags = tuple(t for t in end_tags if t) or (THINK_CLOSE,)
        self._longest_tag = max(len(t) for t in (start_tag, *self.end_tags))
        self._inside = starts_in_reasoning
        self._tail = ""  # the end of the text seen so far, where a tag may be starting
        self._remaining = budget
        self._exhausted = False  # spent, and the end not yet forced
        self._forcing = False  # the end was handed out; waiting for reasoning to close
        self.spent = 0  # reasoning tokens counted so far, over all windows
        if starts_in_reasoning:
            self._open_window()

    @property
    def enabled(self) -> bool:
        return self.budget >= 0

    @property
    def in_reasoning(self) -> bool:
        return self._inside

    def forced_text(self) -> str | None:
        """The text to force now (once per exhausted window), else None."""
        if not self._exhausted:
            return None
        self._exhausted = False
        self._forcing = True
        return self.message + self.end_tags[0]

    def force(self) -> bool:
        """End the current reasoning now (``reasoning_end``): the next :meth:`forced_text` hands out the end.

        As llama.cpp's ``common_reasoning_budget_force``, only reasoning that is being counted can be ended: outside
        reasoning, or with its end already handed out, nothing changes and this returns False.
        """
        if not self._inside or self._forcing or self._exhausted:
            return False
        self._exhausted = True
        return True

    def accept(self, piece: str) -> None:
        """Account for one generated token's text."""
        was_inside = self._inside
        inside = self._scan(piece)
        if not inside:
            self._forcing = self._exhausted = False
            return
        if not was_inside:
            self._open_window()
            return
        if self._forcing or self._exhausted:
            return
        self.spent += 1
        if self.enabled:
            self._remaining -= 1
            self._exhausted = self._remaining <= 0

    def _open_window(self) -> None:
        self._remaining = self.budget
        self._forcing = False
        self._exhausted = self.enabled and self.budget <= 0

    def _scan(self, piece: str) -> bool:
        text = self._tail + piece
        pos = 0
        while True:
            tags = self.end_tags if self._inside else (self.start_tag,)
            hits = [(found, len(tag)) for tag in tags if (found := text.find(tag, pos)) >= 0]
            if not hits:
                break
            found, length = min(hits)
            self._inside = not self._inside
            pos = found + length
        self._tail = text[max(pos, len(text) - self._longest_tag + 1):]
        return self._inside
