"""Behaviours that llama.cpp's own server suite (``make upstream-test``) checks, each on a real daemon here too."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.sse_frames import frames


def _llamacpp(text: str) -> list[str]:
    """The lines of llama.cpp's own metrics (their HELP, TYPE and samples)."""
    return [line for line in text.splitlines() if "llamacpp:" in line]


def _metric_line(text: str, name: str) -> float:
    [line] = [line for line in text.splitlines() if line.startswith(f"{name} ")]
    return float(line.split(" ", 1)[1])


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
        # Asleep, /metrics is the text it had awake, b10621's families and mlxd's own alike (upstream
        # test_sleep.py::test_server_sleep_read_only_endpoints compares the whole text); the generation that falling
        # asleep committed shows once the model wakes.
        assert client.get("/metrics").text == awake
        assert client.get("/props").json()["is_sleeping"] is True
        assert client.post("/tokenize", json={"content": "Hello"}).status_code == 200  # wakes it
        woken = client.get("/metrics").text
        assert _metric_line(woken, "mlxd_config_generation") > _metric_line(awake, "mlxd_config_generation")
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


def test_vertex_ai_predict_dispatches_each_instance(start_server: Any) -> None:
    # upstream test_compat_gcp.py: AIP_MODE=PREDICTION mounts the predict route; AIP_HTTP_PORT replaces --port.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": str(port), "AIP_HEALTH_ROUTE": "healthz"}
    server = start_server("--api-key", "k", env=env, wait_ready=False)
    assert server.base_url.endswith(f":{port}")
    key = {"Authorization": "Bearer k"}
    with server.client(headers=key) as client:
        deadline = time.monotonic() + 60
        while client.get("/healthz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        chat = {"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], "stream": True}
        body = {"instances": [{"@requestFormat": "chatCompletions", **chat},
                              {"@requestFormat": "/completion", "prompt": "Once", "n_predict": 2},
                              {"@requestFormat": "tokenize", "content": "hello"},
                              {"@requestFormat": "noSuchRoute"}, "not an object",
                              {"@requestFormat": "completions", "prompt": "x", "n_predict": "bad"}]}
        answer = client.post("/predict", json=body)
        assert answer.status_code == 200
        chat_answer, native, tokens, unknown, not_object, bad = answer.json()["predictions"]
        assert chat_answer["object"] == "chat.completion" and chat_answer["choices"][0]["message"]["role"] == "assistant"
        assert native["tokens_predicted"] == 2
        assert tokens == client.post("/tokenize", json={"content": "hello"}).json()
        assert unknown["error"]["message"] == "no handler registered for @requestFormat: noSuchRoute"
        assert not_object["error"]["message"] == "each instance must be a JSON object"
        assert bad["error"]["type"] == "invalid_request_error"
        for wrong in ({}, {"instances": {}}, {"instances": [{}] * 129}):
            refused = client.post("/predict", json=wrong)
            assert refused.status_code == 400 and refused.json()["error"]["type"] == "invalid_request_error"
    with server.client() as client:
        assert client.post("/predict", json={"instances": []}).status_code == 401
        assert client.get("/healthz").status_code == 401  # b10621's public paths are /health and /v1/health only
        assert client.get("/health").status_code == 200


def test_responses_stream_carries_timings(server: Any) -> None:
    # upstream test_compat_oai_responses.py: with timings_per_token each token's last event has "timings", and
    # response.completed always has them (b10621 sets a final result's stats whatever the request asked).
    body = {"input": "This is a test " * 4, "max_output_tokens": 4, "stream": True, "return_progress": True}
    with server.client() as client:
        for per_token in (True, False):
            events = frames(client.post("/responses", json={**body, "timings_per_token": per_token}).text)
            data = [(name, json.loads(payload)) for name, payload in events]
            deltas = [d for name, d in data if name == "response.output_text.delta"]
            assert deltas and all(("timings" in d) is per_token for d in deltas)
            assert any("prompt_progress" in d for name, d in data if name == "response.in_progress")
            name, completed = data[-1]
            assert name == "response.completed"
            assert completed["timings"]["predicted_n"] == completed["response"]["usage"]["output_tokens"]


def test_the_context_explained_is_the_context_served(start_server: Any, tiny_checkpoint: Path) -> None:
    # Without -c, config explain's ctx-size (the checkpoint's, from config.json) is the context /props reports.
    explained = subprocess.run([str(Path(sys.executable).parent / "mlxd"), "config", "explain", "--format", "json",
                                "--", "-m", str(tiny_checkpoint)], capture_output=True, text=True, timeout=120,
                               check=True)
    ctx = json.loads(explained.stdout)["options"]["ctx-size"]
    assert ctx["source"] == "checkpoint:config.json"
    server = start_server("--parallel", "1")
    with server.client() as client:
        assert client.get("/props").json()["default_generation_settings"]["n_ctx"] == ctx["value"]


def test_an_idle_slot_shows_no_decoded_tokens(server: Any) -> None:
    # upstream test_metrics.py::test_metrics_slots_idle_after_completion: the finished task's counters stay with it
    with server.client() as client:
        assert client.post("/completion", json={"prompt": "I believe", "n_predict": 8}).status_code == 200
        slots = client.get("/slots").json()
        assert any("next_token" in slot for slot in slots)  # the slot that ran it shows its last task
        for slot in slots:
            assert slot["is_processing"] is False
            if "next_token" in slot:
                assert slot["next_token"][0]["n_remain"] == -1
                assert slot["next_token"][0]["n_decoded"] == 0
