"""The n-gram speculative step (the draft-free ``--spec-type``s: ``ngram-simple``, ``ngram-map-k``,
``ngram-map-k4v``, ``ngram-mod``, ``ngram-cache``): proposals from the sequences' own tokens (engine.speculative.ngram_draft),
verified for every row in one forward pass of the target, as a draft model's are (engine.speculative). A mixin of
``Scheduler``.
"""

from __future__ import annotations

from typing import Callable

import mlx.core as mx
import numpy as np

from mlxd.engine.batching import readback
from mlxd.engine.speculative import rejection as rs
from mlxd.engine.batching.batch import DecodeBatch
from mlxd.engine.speculative.ngram_draft import Lookups
from mlxd.engine.speculative.draft_model import draws, live, room


class NgramStep:
    """The step that verifies n-gram proposals; a mixin of ``Scheduler``."""

    # Provided by the Scheduler this is mixed into (engine.speculative's Speculating among them).
    batch: DecodeBatch
    ngram: Lookups | None
    _steps: int
    _settle: Callable[[], None]
    _retire: Callable[[list[int]], None]
    _verify: Callable[..., tuple[mx.array, mx.array | None]]
    _emit: Callable[..., tuple[list[int], list[int], int]]

    def _ngram_step(self, sampled: list[int]) -> bool:
        """Verify every row's n-gram proposals in one forward pass (the draft-free ``--spec-type``s);
        False when no row has any. A row without proposals offers none: its pass still emits the one token a plain
        step would."""
        batch, lookups = self.batch, self.ngram
        assert lookups is not None
        if any(batch.awaiting):  # the lookup needs each row's last token on the host
            # Reading it back stops the pipelined greedy step, so that is done only where the history up to the
            # token before repeats itself: elsewhere a repeat found one step later costs one plain step.
            if not any(lookups.might_propose(s, live(s)) for s in batch.slots):
                return False
            self._settle()
            if not len(batch):
                return True
        proposals, rooms, counts = [], [], []
        for slot in batch.slots:  # each sequence's tokens end with its pending one now
            space = room(slot)
            found, count = lookups.propose(slot, live(slot), space)
            proposals.append(found)
            rooms.append(space)
            counts.append(count if found else None)
        k = max(len(p) for p in proposals)
        if k == 0:
            return False
        # The verification pass is compiled per shape: k padded to a power of two keeps the traces few (the padding
        # is offered by no row, and fits where the longest proposal's row has room).
        k = min(1 << (k - 1).bit_length(), max(rooms))
        self._steps += 1
        pending = batch.tokens
        assert pending is not None
        drafts = [p + [0] * (k - len(p)) for p in proposals]
        targets, rows = self._verify(pending, mx.array(drafts, dtype=mx.uint32), sampled)
        mx.eval([targets] + ([rows] if rows is not None else []))
        chosen: dict[int, tuple[list[int], int]] = {}
        if rows is not None:
            host = np.array(rows, copy=False)
            for r, i in enumerate(sampled):
                seq = live(batch.slots[i])
                chosen[i] = rs.verify_fixed(seq.sampler, host[r], proposals[i], draws(seq))
        keep, done, _ = self._emit(k, [len(p) for p in proposals], chosen, drafts, readback.int_rows(targets))
        for kept, count in zip(keep, counts):  # finished rows too: they leave below
            if count is not None:
                count(kept)
        if done:
            self._retire(done)
        return True
