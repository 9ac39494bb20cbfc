"""Changes under load: with 8 greedy streams running continuously, a logging change and a model swap complete
and not one request fails or is cut short (the swapped-in model has the same weights, so every answer is equal)."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import httpx

from tests.e2e.admin_harness import admin, short_dir, wait_for
from tests.e2e.conftest import launch
from tests.e2e.sse_frames import payloads

STREAMS = 8
BODY = {"prompt": "Once upon a time", "n_predict": 12, "ignore_eos": True, "temperature": 0, "stream": True}


def _answer(client: httpx.Client) -> str:
    """One streamed completion's text; raises unless it ended with ``stop`` after every token."""
    response = client.post("/completion", json=BODY)
    response.raise_for_status()
    chunks = payloads(response.text)
    final = chunks[-1]
    assert final["stop"] is True and final["tokens_predicted"] == BODY["n_predict"], json.dumps(final)[:300]
    return "".join(c["content"] for c in chunks)


def test_logging_change_and_model_swap_under_eight_streams(tiny_checkpoint: Path) -> None:
    home = short_dir()
    sock = home / "admin.sock"
    twin = home / "twin"
    shutil.copytree(tiny_checkpoint, twin)
    running = launch(["-m", str(tiny_checkpoint), "--host", "127.0.0.1", "--port", "0", "--parallel", str(STREAMS),
                      "--ctx-size", "1024", "--admin-listen", f"unix:{sock}"], home / "mlxd.log")
    try:
        with running.client() as client:
            reference = _answer(client)
        stop = threading.Event()
        done = [0] * STREAMS
        answers: list[str] = []
        errors: list[str] = []

        def stream(i: int) -> None:
            with running.client(timeout=120) as client:
                while not stop.is_set():
                    try:
                        answers.append(_answer(client))
                        done[i] += 1
                    except (AssertionError, httpx.HTTPError, ValueError) as exc:
                        errors.append(f"{type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(STREAMS)]
        for thread in threads:
            thread.start()
        wait_for(lambda: min(done) >= 1, 120, "every stream to finish a request")
        with admin(sock) as control:
            assert control.put("/v1/logging", json={"log-prefix": True}).status_code == 200
            swapped = control.post("/v1/models", json={"action": "load", "name": str(twin)})
            assert swapped.status_code == 200 and swapped.json()["changed"] == ["model"], swapped.text
            after = list(done)
            wait_for(lambda: all(d > a for d, a in zip(done, after)), 120, "a request on the new model per stream")
            stop.set()
            for thread in threads:
                thread.join(120)
            status = control.get("/v1/status").json()
        assert errors == []
        assert answers and set(answers) == {reference}
        assert status["last_error"] is None
        assert {"name": str(twin), "state": "loaded", "error": None} in status["models"]
    finally:
        running.stop()
        shutil.rmtree(home, ignore_errors=True)
