"""-ctk / -ctv through a real ``mlxd-server``: a q8_0 cache serves completions and /props reports its memory."""

from __future__ import annotations

from collections.abc import Callable

from tests.conftest import synthetic_checkpoint
from tests.e2e.conftest import RunningServer


def test_a_q8_0_kv_cache_serves_and_props_reports_its_memory(start_server: Callable[..., RunningServer]) -> None:
    running = start_server("-m", str(synthetic_checkpoint("tiny-hd32")), "-ctk", "q8_0", "-ctv", "q8_0", "-c", "1024",
                           "-np", "2")
    with running.client() as client:
        body = client.post("/completion", json={"prompt": "The quick brown fox", "n_predict": 8,
                                                "temperature": 0}).json()
        assert body["tokens_predicted"] == 8
        kv = client.get("/props").json()["kv_cache"]
        assert (kv["type_k"], kv["type_v"], kv["quantized"]) == ("q8_0", "q8_0", True)
        # tiny-hd32: 2 layers x 1 KV head x (32 + 32) values, each 1 byte plus a float32 scale and bias per 32.
        assert kv["bytes_per_token"] == 2 * 64 * (1 + 8 / 32)
        assert kv["bytes_per_slot"] == kv["bytes_per_token"] * 512
