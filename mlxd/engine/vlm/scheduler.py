"""The scheduler of a multimodal model: the text scheduler, with media prompts prefilled through the towers.

A prompt with media is computed from its input embeddings (the vision and audio towers' output merged into the
token embeddings at the placeholder positions, by mlx-vlm's ``get_input_embeddings``) and with the model's own
position ids for it; the rest of its life (first token, decode batch, slots, prompt cache, cancellation) is the
text scheduler's. Text prompts of the same model take the text path unchanged.

mlx-vlm's own ``BatchGenerator`` batches mixed media requests correctly, but it is not used, for the reasons the
text scheduler gives for mlx-lm's (host-side sampling chain, text stop strings, slots), and because its prompt
cache matches on tokens alone: a different image of the same size expands to the same placeholder tokens and would
reuse the other image's cached prefix. Here media prompts carry their media's key in the cache namespace.

The row shift a media prompt leaves (``rope_deltas``: Qwen-VL's images take fewer positions than tokens) is kept
per slot and handed to the ``TextView`` for every decode step, row by row.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from mlxd.engine.batching import readback
from mlxd.engine.batching.scheduler import Scheduler
from mlxd.engine.batching.slots.table import Slot
from mlxd.engine.vlm.inputs import MediaInputs
from mlxd.engine.vlm.text_view import TextView


class _MediaState:
    """A media prompt's embeddings and positions, computed once and consumed chunk by chunk."""

    def __init__(self, embeds: mx.array, positions: mx.array | None, extras: dict[str, Any], shift: int) -> None:
        self.embeds, self.positions, self.extras, self.shift = embeds, positions, extras, shift


class MultimodalScheduler(Scheduler):
    """``Scheduler`` whose prompts may carry ``request.media`` (an ``engine.vlm.MediaInputs``)."""

    model: TextView

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._media: dict[int, _MediaState] = {}  # by id of the Sequence being prefilled
        self._shifts: dict[int, int] = {}  # by slot id: the row shift of the slot's running sequence
        self.model.row_shift = self._row_shift

    def _row_shift(self, cache: list[Any], rows: int) -> list[int] | None:
        batch = self.batch
        if batch.cache is None or cache is not batch.cache or not self._shifts:
            return None
        return [self._shifts.get(slot.id, 0) if slot.seq is not None else 0 for slot in batch.slots][:rows]

    @staticmethod
    def _media_of(slot: Slot) -> MediaInputs | None:
        seq = slot.seq
        media = getattr(seq.request, "media", None) if seq is not None else None
        return media if isinstance(media, MediaInputs) else None

    def _prefill_group(self, budget: int) -> list[Slot]:
        # Media prompts go through their towers one at a time; only text prompts are grouped.
        group = [slot for slot in super()._prefill_group(budget) if self._media_of(slot) is None]
        return group if len(group) > 1 else []

    def _prefill_chunk(self, slot: Slot, budget: int) -> tuple[int, mx.array | None]:
        media = self._media_of(slot)
        seq = slot.seq
        if media is None or seq is None:
            self._shifts.pop(slot.id, None)
            return super()._prefill_chunk(slot, budget)
        kv = slot.kv
        assert kv is not None
        state = self._media.get(id(seq))
        if state is None:
            state = self._media[id(seq)] = self._embed(seq.prompt, media)
        self._shifts[slot.id] = state.shift
        start = seq.n_past
        todo = len(seq.prompt) - start
        n = min(todo, budget)
        # The step's tokens in forward passes of at most --ubatch-size (b10621's physical batch), each evaluated
        # before the next is built, as a text prompt's (engine.batching.prefill).
        ubatch = self.settings.ubatch_size
        for i in range(start, start + n, ubatch):
            if i > start:
                mx.eval([c.state for c in kv])
            j = min(i + ubatch, start + n)
            pos = state.positions[..., i:j] if state.positions is not None else None
            extras = {k: v[:, i:j] for k, v in state.extras.items()}
            logits = self.model(mx.array(seq.prompt[i:j])[None], cache=kv, inputs_embeds=state.embeds[:, i:j],
                                position_ids=pos, **extras)
        seq.n_past += n
        seq.n_prompt_processed += n
        seq.progress()
        if n < todo:
            mx.eval([c.state for c in kv])
            return n, None
        del self._media[id(seq)]
        return n, self._prompt_processed(slot, kv, logits[:, -1, :])

    def _embed(self, prompt: list[int], media: MediaInputs) -> _MediaState:
        """The whole prompt's input embeddings and position ids, as mlx-vlm computes them for one generation."""
        vlm = self.model.vlm
        arrays = dict(media.arrays)
        ids = mx.array(prompt)[None]
        features = vlm.get_input_embeddings(ids, arrays.pop("pixel_values", None), **arrays)
        embeds = features.inputs_embeds
        fields = {k: v for k, v in features.to_dict().items() if k != "inputs_embeds" and v is not None}
        positions = fields.pop("position_ids", None)
        deltas = fields.pop("rope_deltas", None)
        # Other per-position inputs some families take (per-layer inputs), sliced with the embeddings.
        extras = {k: v for k, v in fields.items()
                  if isinstance(v, mx.array) and v.ndim >= 2 and v.shape[1] == len(prompt)}
        shift = readback.item_int(deltas.reshape(-1)[0]) if isinstance(deltas, mx.array) else 0
        if positions is not None and positions.ndim == 2:
            positions = mx.broadcast_to(positions[None], (3, *positions.shape))
        return _MediaState(embeds, positions, extras, shift)

    def _release(self, slot: Slot, kv: list[Any] | None) -> None:
        self._forget(slot)
        super()._release(slot, kv)

    def _drop(self, slot: Slot, message: str) -> None:
        self._forget(slot)
        super()._drop(slot, message)

    def _forget(self, slot: Slot) -> None:
        if slot.seq is not None:
            self._media.pop(id(slot.seq), None)
        self._shifts.pop(slot.id, None)
