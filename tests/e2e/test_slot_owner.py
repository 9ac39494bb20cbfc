"""Slot files carry what wrote them (issue 28, finding 4): a file saved on one model restores only on that model
(its weights' digest, architecture, layer count, KV shapes), into a slot whose context holds its tokens; anything
else is b10621's "Unable to restore slot" 400. Restored on the same model, the greedy continuation is identical.

Three synthetic checkpoints: ``tiny`` (seed 0) writes the file; ``tiny`` seed 1 has the same shapes and other
weights; ``tiny-hd32`` another head size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import httpx

from mlxd.engine.batching.slots.actions import RESTORE_FAILED
from tests.conftest import synthetic_checkpoint
from tests.e2e.conftest import RunningServer

PROMPT = "The quick brown fox jumps over the lazy dog and then"
GREEDY = {"prompt": PROMPT, "n_predict": 12, "temperature": 0, "cache_prompt": True, "id_slot": 0}


def restore(client: httpx.Client, filename: str) -> httpx.Response:
    return client.post("/slots/0", params={"action": "restore"}, json={"filename": filename})


def refused(answer: httpx.Response) -> None:
    assert answer.status_code == 400, answer.text
    assert answer.json() == {"error": {"code": 400, "message": RESTORE_FAILED, "type": "invalid_request_error"}}


def test_a_slot_file_restores_only_on_the_model_that_wrote_it(start_server: Callable[..., RunningServer],
                                                              tmp_path: Path) -> None:
    slots = tmp_path / "slots"
    slots.mkdir()

    def daemon(checkpoint: Path, *extra: str) -> RunningServer:
        return start_server("-m", str(checkpoint), "--slot-save-path", str(slots), "-np", "1", *extra)

    writer = daemon(synthetic_checkpoint("tiny"), "-c", "1024")
    with writer.client() as client:
        first: dict[str, Any] = client.post("/completion", json=GREEDY).json()
        saved = client.post("/slots/0", params={"action": "save"}, json={"filename": "s0.bin"}).json()
        assert saved["n_saved"] > first["timings"]["prompt_n"] // 2
    writer.stop()

    # The same weights in another daemon, with a smaller context that still holds the file's tokens.
    same = daemon(synthetic_checkpoint("tiny"), "-c", "256")
    with same.client() as client:
        restored = restore(client, "s0.bin")
        assert restored.status_code == 200, restored.text
        assert restored.json()["n_restored"] == saved["n_saved"]
        again = client.post("/completion", json=GREEDY).json()
        assert again["content"] == first["content"]
        assert again["timings"]["cache_n"] > 0  # the restored cache was reused, not recomputed
    same.stop()

    # Same shapes, other weights: the cache would silently change the answer.
    other = daemon(synthetic_checkpoint("tiny", seed=1), "-c", "1024")
    with other.client() as client:
        refused(restore(client, "s0.bin"))
        assert client.post("/completion", json=GREEDY).status_code == 200  # still serving
    other.stop()

    # Another head size (another architecture's shapes).
    shapes = daemon(synthetic_checkpoint("tiny-hd32"), "-c", "1024")
    with shapes.client() as client:
        refused(restore(client, "s0.bin"))
    shapes.stop()

    # The same model with a context too small for the file's tokens.
    small = daemon(synthetic_checkpoint("tiny"), "-c", str(max(8, saved["n_saved"] // 2)))
    with small.client() as client:
        refused(restore(client, "s0.bin"))
