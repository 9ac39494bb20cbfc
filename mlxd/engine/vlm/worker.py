"""The model worker of a multimodal checkpoint: the text worker with the multimodal scheduler, and media prompts
prepared on its thread (the processor makes MLX arrays, which only the worker's thread may do)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Sequence

from mlxd.engine.loading.loader import LoadedModel
from mlxd.engine.loading.lora import LoraSet
from mlxd.engine.settings import WorkerSettings
from mlxd.engine.vlm.inputs import MediaInputs, Medium, prepare
from mlxd.engine.vlm.load import MultimodalModel
from mlxd.engine.vlm.scheduler import MultimodalScheduler
from mlxd.engine.batching.worker import ModelWorker
from mlxd.errors import Unavailable


class MultimodalWorker(ModelWorker):
    """Serves a ``MultimodalModel``: text and media prompts batched together."""

    scheduler_class = MultimodalScheduler
    loaded: MultimodalModel

    def prepare(self, text: str, marker: str, media: Sequence[Medium]) -> Future[tuple[list[int], MediaInputs]]:
        """Queue the processing of a media prompt (between steps, on the worker thread); the future holds its
        token ids and tower inputs, or an ``InvalidRequest``."""
        assert self.loaded.media is not None
        parts = self.loaded.media
        done: Future[tuple[list[int], MediaInputs]] = Future()
        with self._cv:
            if not self._accepting:
                raise Unavailable("the model is not accepting requests (it is stopping or not started)")
            self._jobs.append((lambda: prepare(parts, text, marker, list(media)), done))
            self._cv.notify_all()
        return done


def make_worker(loaded: LoadedModel, settings: WorkerSettings, *, lora: LoraSet | None = None,
                draft: LoadedModel | None = None) -> ModelWorker:
    """The worker for a loaded model: multimodal when the checkpoint's media parts were loaded."""
    kind = MultimodalWorker if isinstance(loaded, MultimodalModel) and loaded.media is not None else ModelWorker
    return kind(loaded, settings, lora=lora, draft=draft)
