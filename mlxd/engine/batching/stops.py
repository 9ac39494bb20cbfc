"""Stop strings matched across token boundaries, and llama-server's ``n_indent`` rule.

Text is fed as it is decoded. A stop string that completes ends the generation: the text before it is emitted,
the stop and everything after it are dropped. Text that may still turn into a stop string (a suffix that is a
prefix of one) is held back until it either completes a stop or can no longer do so, so nothing is ever streamed
and then retracted. When several stop strings are complete at once, the one starting earliest wins (the first
listed on a tie), as in b10621's ``find_stopping_strings``.
"""

from __future__ import annotations

from collections.abc import Iterable


class StopMatcher:
    """Incremental stop-string matching over streamed text."""

    def __init__(self, stops: Iterable[str]) -> None:
        # An empty stop string would match before any text; it is ignored.
        self.stops = [s for s in stops if s]
        self._pending = ""
        self.matched: str | None = None

    @property
    def held(self) -> str:
        """Text received but not yet emitted, because it may start a stop string."""
        return self._pending

    def feed(self, text: str) -> tuple[str, str | None]:
        """Add decoded text; returns (text safe to emit now, the stop string matched or None).

        Once a stop has matched, further text is dropped and the same stop is returned.
        """
        if self.matched is not None:
            return "", self.matched
        buf = self._pending + text
        best_pos, best_stop = -1, None
        for stop in self.stops:
            pos = buf.find(stop)
            if pos != -1 and (best_stop is None or pos < best_pos):
                best_pos, best_stop = pos, stop
        if best_stop is not None:
            self.matched = best_stop
            self._pending = ""
            return buf[:best_pos], best_stop
        hold = self._partial_start(buf)
        self._pending = buf[hold:]
        return buf[:hold], None

    def flush(self) -> str:
        """End of generation without a stop: release the held text."""
        out, self._pending = self._pending, ""
        return out

    def _partial_start(self, buf: str) -> int:
        """The earliest position from which the rest of ``buf`` is a proper prefix of some stop string."""
        start = len(buf)
        for stop in self.stops:
            # Longest candidate first: the earliest start for this stop.
            for n in range(min(len(stop) - 1, len(buf)), 0, -1):
                if buf.endswith(stop[:n]):
                    start = min(start, len(buf) - n)
                    break
        return start


class IndentLimit:
    """b10621's ``n_indent``: once a newline has been generated, each new line must start with at least
    ``n_indent`` spaces or tabs, or generation stops (``stop_type`` "limit") and that line is cut where its
    indentation ends.

    Call ``check`` after each token with the whole generated text; it returns the length to cut the text to when
    the rule fires, else None. Like upstream, the check only starts with the token after the first newline.
    """

    def __init__(self, n_indent: int) -> None:
        self.n_indent = n_indent
        self.last_nl_pos = 0
        self.has_new_line = False

    def check(self, generated_text: str, token_text: str) -> int | None:
        """Apply the rule for the token just added (``token_text`` is its emitted text)."""
        cut = None
        if self.has_new_line and self.n_indent > 0:
            if self.last_nl_pos > 0:
                pos = self.last_nl_pos
                indent = 0
                while pos < len(generated_text) and generated_text[pos] in " \t":
                    indent += 1
                    pos += 1
                if pos < len(generated_text) and indent < self.n_indent:
                    cut = pos
                    generated_text = generated_text[:pos]
            nl = generated_text.find("\n", self.last_nl_pos)
            if nl != -1:
                self.last_nl_pos = nl + 1
        if "\n" in token_text:
            self.has_new_line = True
        return cut
