"""Decode counters of one model worker: what b10621 reports as ``llamacpp:n_decode_total`` and
``llamacpp:n_busy_slots_per_decode``.

b10621 counts its ``llama_decode()`` calls and, for each, the slots busy at that moment. mlxd's equivalent of one
such call is one batched forward pass of the model: a decode step of the whole batch, a prompt chunk, a group of
prompts processed together, or one batch of embedding inputs. The worker thread counts; ``/metrics`` reads.
"""

from __future__ import annotations

import threading


class DecodeCounter:
    """Forward passes and the busy slots summed over them; ``count`` runs on the worker thread, ``read`` anywhere."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._n_decode = 0
        self._n_busy_slots = 0

    def count(self, n_busy_slots: int) -> None:
        """One forward pass ran while ``n_busy_slots`` slots (at least the one it served) were busy."""
        with self._lock:
            self._n_decode += 1
            self._n_busy_slots += max(1, n_busy_slots)

    def read(self) -> tuple[int, int]:
        """(forward passes, busy slots summed over them) so far."""
        with self._lock:
            return self._n_decode, self._n_busy_slots
