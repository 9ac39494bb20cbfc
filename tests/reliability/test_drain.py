"""SIGTERM under streams: every in-flight request, streamed or not, finishes within --shutdown-timeout; past
it, what still runs ends with b10621's in-band error and the process exits."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any, Callable

import httpx

from tests.e2e.admin_harness import wait_for
from tests.e2e.conftest import RunningServer


class Stream(threading.Thread):
    """One streamed /completion read to its end; ``started`` is set at its first token."""

    def __init__(self, base_url: str, n_predict: int) -> None:
        super().__init__(daemon=True)
        self.base_url, self.n_predict = base_url, n_predict
        self.started = threading.Event()
        self.payloads: list[dict[str, Any]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        body = {"prompt": "Once upon a time", "n_predict": self.n_predict, "ignore_eos": True, "stream": True}
        try:
            with httpx.Client(base_url=self.base_url, timeout=120) as client:
                with client.stream("POST", "/completion", json=body) as response:
                    for line in response.iter_lines():
                        if line.startswith("data: "):
                            self.payloads.append(json.loads(line[len("data: "):]))
                            self.started.set()
        except httpx.HTTPError as exc:
            self.error = exc

    @property
    def tokens(self) -> int:
        return sum(1 for p in self.payloads if "content" in p and not p.get("stop"))


def streaming(running: RunningServer, n: int, n_predict: int) -> list[Stream]:
    streams = [Stream(running.base_url, n_predict) for _ in range(n)]
    for stream in streams:
        stream.start()
    for stream in streams:
        assert stream.started.wait(120), running.log()
    return streams


def test_sigterm_lets_every_stream_finish(start_server: Callable[..., RunningServer]) -> None:
    running = start_server("--parallel", "8", "-c", "16384", "--shutdown-timeout", "30")
    streams = streaming(running, 8, 800)

    running.send_signal(signal.SIGTERM)
    for stream in streams:
        stream.join(120)
    assert running.process.wait(60) == 0, running.log()
    log = running.log()
    for stream in streams:
        assert stream.error is None, (stream.error, log)
        final = stream.payloads[-1]
        assert final.get("stop") is True and final["tokens_predicted"] == 800, (final, log)
        assert "error" not in final
    draining = next(line for line in log.splitlines() if "draining:" in line)
    assert "8 request(s) in flight" in draining, log


def test_sigterm_past_the_timeout_ends_streams_with_the_in_band_error(
        start_server: Callable[..., RunningServer]) -> None:
    running = start_server("--parallel", "4", "-c", "8192", "--shutdown-timeout", "2")
    streams = streaming(running, 3, 100000)
    whole: dict[str, Any] = {}

    def non_streamed() -> None:
        with httpx.Client(base_url=running.base_url, timeout=120) as client:
            response = client.post("/completion", json={"prompt": "Hi", "n_predict": 100000, "ignore_eos": True})
            whole.update(status=response.status_code, body=response.json())

    waiter = threading.Thread(target=non_streamed, daemon=True)
    waiter.start()
    with httpx.Client(base_url=running.base_url, timeout=30) as client:
        wait_for(lambda: sum(s["is_processing"] for s in client.get("/slots").json()) == 4, 60,
                 "the non-streamed request to take a slot")

    running.send_signal(signal.SIGTERM)
    # Bounded only to catch a hang: the drain waits 2 s, then ends what runs.
    assert running.process.wait(15) == 0, running.log()
    for stream in streams:
        stream.join(15)
        assert not stream.is_alive()
        assert stream.tokens > 0
        last = stream.payloads[-1]
        assert set(last) == {"error"} and "unloaded before the request finished" in last["error"]["message"], last
    waiter.join(15)
    assert whole["status"] == whole["body"]["error"]["code"] and "unloaded before" in whole["body"]["error"]["message"]
    assert "drain timed out with 4 request(s) in flight" in running.log()


def test_a_second_sigterm_exits_at_once(start_server: Callable[..., RunningServer]) -> None:
    running = start_server("--shutdown-timeout", "600")
    streams = streaming(running, 1, 100000)

    running.send_signal(signal.SIGTERM)
    wait = threading.Event()
    wait.wait(0.5)  # the first signal has been read (the log says so below)
    running.send_signal(signal.SIGINT)
    assert running.process.wait(15) == 1, running.log()
    assert "terminating immediately" in running.log()
    streams[0].join(15)
    assert not streams[0].is_alive()


def test_new_requests_while_draining_are_refused(start_server: Callable[..., RunningServer]) -> None:
    running = start_server("--shutdown-timeout", "30")
    with httpx.Client(base_url=running.base_url, timeout=30) as client:
        assert client.get("/health").status_code == 200  # the keep-alive connection a drain must not reuse
        streams = streaming(running, 1, 100000)
        running.send_signal(signal.SIGTERM)
        wait_for(lambda: "draining:" in running.log(), 30, "the drain")
        try:
            response = client.get("/health")
            assert response.status_code == 503 and response.json()["error"]["type"] == "unavailable_error"
        except httpx.TransportError:
            pass  # the idle keep-alive connection was closed at the drain's start: refused as well
        try:
            httpx.get(running.base_url + "/health", timeout=5)
            raise AssertionError("a new connection was accepted while draining")
        except httpx.TransportError:
            pass
    running.send_signal(signal.SIGINT)
    running.process.wait(15)
    streams[0].join(15)
