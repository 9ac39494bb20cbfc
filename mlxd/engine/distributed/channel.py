"""Rank 0's word to the other ranks before each scheduler step, over the group itself.

mx.distributed has no broadcast, so rank 0's bytes are summed with zeros from the others (``all_sum``). The same
collective checks the group: every rank adds 1 to a presence byte, and a sum short of the group's size means a
rank has gone. The ring backend does not raise when a peer's socket closes (it logs and fails the pending
operation, leaving the result undefined), so this check is what stops a rank from stepping on in a broken group.
"""

from __future__ import annotations

import numpy as np

import mlx.core as mx

# Bytes of the fixed first collective: presence (1), payload length (4), then the payload's first bytes. Most
# steps say nothing or a few small commands; a longer payload takes a second collective for the rest.
HEAD = 1024
_INLINE = HEAD - 5


class GroupBroken(RuntimeError):
    """A rank of the group has gone: nothing computed from here on can be trusted."""


class StepChannel:
    """Broadcast of one payload per step from rank 0 (``send``) to the others (``receive``)."""

    def __init__(self, group: mx.distributed.Group) -> None:
        self.group = group
        self.size = group.size()

    def _sum(self, buf: np.ndarray) -> np.ndarray:
        out = mx.distributed.all_sum(mx.array(buf), group=self.group, stream=mx.cpu)
        return np.array(out, dtype=np.uint8)

    def _exchange(self, payload: bytes) -> bytes:
        head = np.zeros(HEAD, dtype=np.uint8)
        head[0] = 1
        if self.group.rank() == 0:
            head[1:5] = np.frombuffer(len(payload).to_bytes(4, "little"), dtype=np.uint8)
            first = payload[:_INLINE]
            head[5:5 + len(first)] = np.frombuffer(first, dtype=np.uint8)
        got = self._sum(head)
        if int(got[0]) != self.size:
            raise GroupBroken(f"{self.size - int(got[0])} of {self.size} ranks did not answer the step")
        n = int.from_bytes(got[1:5].tobytes(), "little")
        data = got[5:5 + min(n, _INLINE)].tobytes()
        if n > _INLINE:
            rest = np.zeros(n - _INLINE, dtype=np.uint8)
            if self.group.rank() == 0:
                rest[:] = np.frombuffer(payload[_INLINE:], dtype=np.uint8)
            data += self._sum(rest).tobytes()
        return data

    def send(self, payload: bytes) -> None:
        """Rank 0: hand ``payload`` to every rank; raises GroupBroken when a rank has gone."""
        self._exchange(payload)

    def receive(self) -> bytes:
        """Another rank: rank 0's payload for this step; raises GroupBroken when a rank has gone."""
        return self._exchange(b"")
