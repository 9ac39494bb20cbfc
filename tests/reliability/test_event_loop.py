"""The event loop never runs model-sized work: while a large body is tokenized, /health keeps answering."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from tests.e2e.conftest import RunningServer

TEXT = "Once upon a time there was a little dragon. "


def health_answers_during(server: RunningServer, path: str, body: dict[str, Any]) -> tuple[int, int]:
    """(status of the large request, /health answers received while it ran)."""
    done = threading.Event()
    result: dict[str, int] = {}

    def large() -> None:
        with httpx.Client(base_url=server.base_url, timeout=300) as client:
            # Done at the response's head: its download is not the server's work.
            with client.stream("POST", path, json=body) as response:
                result["status"] = response.status_code
                done.set()
                response.read()

    worker = threading.Thread(target=large, daemon=True)
    answered = 0
    with server.client(timeout=300) as client:
        assert client.get("/health").status_code == 200
        worker.start()
        while not done.is_set():
            if client.get("/health").status_code == 200 and not done.is_set():
                answered += 1
            done.wait(0.02)
    worker.join()
    return result["status"], answered


def test_health_answers_while_a_large_text_is_tokenized(server: RunningServer) -> None:
    text = (TEXT * 75000)[:3_000_000]
    status, answered = health_answers_during(server, "/tokenize", {"content": text, "with_pieces": True})
    assert status == 200
    # On the loop, the tokenize would hold /health until it finished: only the few answers sent while the body
    # was still uploading would come back (3 or 4 when this ran on the loop; dozens off it, more on a slower
    # machine, since the tokenize then lasts longer).
    assert answered >= 10, answered


def test_health_answers_while_a_large_prompt_is_tokenized(server: RunningServer) -> None:
    text = (TEXT * 75000)[:3_000_000]
    status, answered = health_answers_during(server, "/completion", {"prompt": text, "n_predict": 1})
    assert status == 400  # it cannot fit the context: refused once tokenized
    assert answered >= 10, answered


def test_a_large_tokenize_with_pieces_is_whole_and_health_answers_while_it_is_sent(server: RunningServer) -> None:
    """The 40 MB answer to a 3 MB text is built, encoded and sent off the loop (mlxd.api.large_body), in pieces
    under its Content-Length: /health answers all along, the download included, and the answer is whole."""
    text = (TEXT * 75000)[:3_000_000]
    done = threading.Event()
    got: dict[str, Any] = {}

    def large() -> None:
        with httpx.Client(base_url=server.base_url, timeout=300) as client:
            answer = client.post("/tokenize", json={"content": text, "with_pieces": True})
            got["answer"] = answer
            done.set()

    worker = threading.Thread(target=large, daemon=True)
    answered, slowest = 0, 0.0
    with server.client(timeout=300) as client:
        worker.start()
        while not done.is_set():
            began = time.monotonic()
            assert client.get("/health").status_code == 200
            slowest = max(slowest, time.monotonic() - began)
            answered += 1
            done.wait(0.02)
        plain = client.post("/tokenize", json={"content": text}).json()["tokens"]
    worker.join()
    answer: httpx.Response = got["answer"]
    assert answer.status_code == 200
    assert int(answer.headers["content-length"]) == len(answer.content) > 1 << 20
    tokens = answer.json()["tokens"]
    assert [t["id"] for t in tokens] == plain
    assert "".join(t["piece"] for t in tokens) == text  # ASCII text: every piece is a string
    assert answered >= 10, answered
    assert slowest < 2.0, slowest  # a generous ceiling: only that the loop was never held for seconds
