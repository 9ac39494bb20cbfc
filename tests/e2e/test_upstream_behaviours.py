"""Behaviours that llama.cpp's own server suite (``make upstream-test``) checks, each on a real daemon here too."""

from __future__ import annotations

import time
from typing import Any

import httpx


def _metric(text: str, name: str) -> float:
    [line] = [line for line in text.splitlines() if line.startswith(f"llamacpp:{name} ")]
    return float(line.split(" ", 1)[1])


def _sleeping(client: httpx.Client, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not client.get("/props").json()["is_sleeping"] and time.monotonic() < deadline:
        time.sleep(0.1)
    return bool(client.get("/props").json()["is_sleeping"])


def test_metrics_answer_while_asleep_without_waking_the_model(start_server: Any) -> None:
    # upstream test_sleep.py: /metrics is served from what the server keeps (b10621's bypass_sleep), the throughput
    # window of the last generation included, and scraping it never wakes the model.
    server = start_server("--sleep-idle-seconds", "1", "--metrics", "--alias", "sleepy")
    with server.client() as client:
        assert client.post("/completion", json={"prompt": "Once upon", "n_predict": 8}).status_code == 200
        assert _sleeping(client)
        asleep = client.get("/metrics")
        assert asleep.status_code == 200
        assert _metric(asleep.text, "predicted_tokens_seconds") > 0
        assert _metric(asleep.text, "tokens_predicted_total") == 8
        assert _metric(asleep.text, "n_decode_total") > 0  # the passes of a worker that is gone still count
        again = client.get("/metrics").text
        assert _metric(again, "predicted_tokens_seconds") == 0  # an empty window: nothing ran
        assert client.get("/props").json()["is_sleeping"] is True

        assert client.post("/tokenize", json={"content": "Hello"}).status_code == 200  # wakes it
        assert client.get("/props").json()["is_sleeping"] is False
        awake = client.get("/metrics").text
        assert _metric(awake, "predicted_tokens_seconds") == 0
        assert _metric(awake, "n_decode_total") == _metric(again, "n_decode_total")  # counted once, kept
        assert 'mlxd_model_info{model="sleepy"} 1' in awake
        assert _sleeping(client)
        assert client.get("/metrics").text == awake  # asleep, the text is the one it had awake
        assert client.get("/props").json()["is_sleeping"] is True
    assert "loaded again" in server.log()


def test_aliases_and_tags_are_sets_and_the_smallest_alias_names_the_model(start_server: Any) -> None:
    # b10621 keeps --alias and --tags in std::sets: listed sorted and unique, and the first alias is the model's id.
    server = start_server("--alias", "tinyllama-2,fim,code,fim", "--tags", "small,chat,fim")
    with server.client() as client:
        [entry] = client.get("/v1/models").json()["data"]
        assert (entry["id"], entry["aliases"], entry["tags"]) == ("code", ["code", "fim", "tinyllama-2"],
                                                                   ["chat", "fim", "small"])
        assert client.get("/props").json()["model_alias"] == "code"
        for name in ("code", "fim", "tinyllama-2"):
            answer = client.post("/v1/chat/completions", json={"model": name, "max_tokens": 1,
                                                               "messages": [{"role": "user", "content": "hi"}]})
            assert answer.status_code == 200 and answer.json()["model"] == "code"
