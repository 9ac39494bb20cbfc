"""``--sleep-idle-seconds`` on a single-model daemon: the model is freed when idle and loaded again on demand."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.e2e.captures import key_set


def _wait_sleeping(client: httpx.Client, want: bool, timeout: float = 20.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        props: dict[str, Any] = client.get("/props").json()
        if props["is_sleeping"] is want or time.monotonic() > deadline:
            return props
        time.sleep(0.1)


def test_idle_model_sleeps_and_the_next_request_wakes_it(start_server) -> None:
    server = start_server("--sleep-idle-seconds", "1")
    with server.client() as client:
        awake = client.get("/props").json()
        assert awake["is_sleeping"] is False
        models = client.get("/v1/models").json()
        first = client.post("/completion", json={"prompt": "Once upon", "n_predict": 4, "temperature": 0}).json()

        asleep = _wait_sleeping(client, True)
        assert asleep["is_sleeping"] is True
        assert key_set(asleep) == key_set(awake)
        # While asleep these answer from what was cached, without waking the model.
        assert client.get("/health").json() == {"status": "ok"}
        assert client.get("/v1/models").json() == models
        assert client.get("/no-such-route").status_code == 404
        assert client.get("/props").json()["is_sleeping"] is True

        again = client.post("/completion", json={"prompt": "Once upon", "n_predict": 4, "temperature": 0})
        assert again.status_code == 200 and again.json()["content"] == first["content"]
        assert client.get("/props").json()["is_sleeping"] is False
    log = server.log()
    assert "unloaded after 1 s idle" in log and "loaded again" in log

