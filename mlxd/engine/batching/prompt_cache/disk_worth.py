"""When an entry of the disk tier is worth reading: reading it back must be faster than computing its tokens.

Two rates decide, each a running average of what this worker measured: the tier's read rate (bytes per second,
file to cache, checksum included) and the prompt rate (prompt tokens computed per second). An entry is read when
``size / read_rate < tokens / prompt_rate``, and only for at least ``MIN_TOKENS`` tokens more than RAM covers: below
that the saving is lost in the noise of a step. Until both rates are measured only ``MIN_TOKENS`` decides: the first
entries are read so that the read rate gets measured at all (an assumed rate could rule out every read, and then it
would never be corrected). bench/bench_cache_disk.py measures both sides (docs/benchmarks.md).
"""

from __future__ import annotations

import threading

MIN_TOKENS = 64  # fewest tokens an entry must add over RAM to be read, or have at all to be written
_ALPHA = 0.3  # weight of the newest measurement in a running average


class Worth:
    """The two running rates and the decision (thread-safe: observed on the worker thread, read anywhere)."""

    def __init__(self, min_tokens: int = MIN_TOKENS) -> None:
        self.min_tokens = min_tokens
        self.read_bps: float | None = None
        self.prompt_tps: float | None = None
        self._lock = threading.Lock()

    def observe_read(self, nbytes: int, seconds: float) -> None:
        if nbytes > 1 << 20 and seconds > 0:  # small files measure the call overhead, not the disk
            with self._lock:
                rate = nbytes / seconds
                self.read_bps = rate if self.read_bps is None else self.read_bps + _ALPHA * (rate - self.read_bps)

    def observe_prompt(self, n_tokens: int, seconds: float) -> None:
        if n_tokens >= self.min_tokens and seconds > 0:
            with self._lock:
                rate = n_tokens / seconds
                self.prompt_tps = rate if self.prompt_tps is None else self.prompt_tps + _ALPHA * (
                    rate - self.prompt_tps)

    def use(self, n_tokens: int, nbytes: int) -> bool:
        """Whether to read ``nbytes`` instead of computing ``n_tokens``."""
        if n_tokens < self.min_tokens:
            return False
        with self._lock:
            if self.prompt_tps is None or self.read_bps is None:
                return True
            return nbytes / self.read_bps < n_tokens / self.prompt_tps

    def worth_writing(self, n_tokens: int) -> bool:
        return n_tokens >= self.min_tokens
