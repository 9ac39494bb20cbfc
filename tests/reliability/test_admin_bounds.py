"""Admin bodies are bounded before any option is looked at (issue 28, findings 2 and 6): a PATCH naming more than
512 keys, or nested deeper than 32 levels (200,000 brackets included, JSON or TOML), is a 400 ``invalid_body``,
never a 500, and the public port answers while it is refused; of the unknown names in an accepted-size PATCH only
the first few get a did-you-mean.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import httpx
import pytest

from mlxd.admin.body import MAX_DEPTH, MAX_NAMES
from mlxd.config.sources.admin import HINTS
from tests.e2e.admin_harness import admin, short_dir
from tests.e2e.conftest import RunningServer


@pytest.fixture
def daemon(start_server: Callable[..., RunningServer]) -> Iterator[tuple[RunningServer, Path]]:
    sock = short_dir() / "admin.sock"
    yield start_server("--admin-listen", f"unix:{sock}"), sock


class HealthProbe:
    """Asks ``/health`` every 20 ms on its own thread while a test's admin call runs; every answer's status."""

    def __init__(self, running: RunningServer) -> None:
        self.running = running
        self.statuses: list[int] = []
        self.slowest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self.running.client(timeout=30) as client:
            while not self._stop.is_set():
                began = time.monotonic()
                self.statuses.append(client.get("/health").status_code)
                self.slowest = max(self.slowest, time.monotonic() - began)
                time.sleep(0.02)

    def __enter__(self) -> "HealthProbe":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(0.1)  # one more answer after the admin call returned
        self._stop.set()
        self._thread.join(30)


JSON = {"content-type": "application/json"}


def refused(answer: httpx.Response, words: str) -> None:
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_body" and words in error["message"], error


def test_a_patch_with_100000_unknown_names_is_refused_while_health_answers(daemon: tuple[RunningServer, Path]
                                                                          ) -> None:
    running, sock = daemon
    # Encoded before the probe starts: encoding it in this process would stall the probe's own thread.
    names = json.dumps({f"no-such-option-{i}": i for i in range(100_000)}).encode()
    with admin(sock) as client, HealthProbe(running) as probe:
        refused(client.patch("/v1/config", content=names, headers=JSON), f"more than the {MAX_NAMES} accepted")
    assert probe.statuses and set(probe.statuses) == {200}
    # A generous ceiling, only to show the loop was never held for the seconds the did-you-means used to cost.
    assert probe.slowest < 2.0, probe.slowest


def test_only_the_first_unknown_names_get_a_suggestion(daemon: tuple[RunningServer, Path]) -> None:
    _, sock = daemon
    names = {f"ctx-sizes-{i}": 1 for i in range(MAX_NAMES)}  # each close to ctx-size
    with admin(sock) as client:
        answer = client.patch("/v1/config", json=names)
    assert answer.status_code == 422, answer.text
    message = answer.json()["error"]["message"]
    assert message.count("unknown option") == MAX_NAMES
    assert message.count("did you mean") == HINTS


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 200_000])
def test_deeply_nested_admin_bodies_are_400(daemon: tuple[RunningServer, Path], depth: int) -> None:
    running, sock = daemon
    nested = "[" * depth + "]" * depth
    with admin(sock) as client:
        refused(client.patch("/v1/config", content=f'{{"tags": {nested}}}'.encode(),
                             headers={"content-type": "application/json"}), "nested deeper")
        refused(client.put("/v1/config", content=f'{{"tags": {nested}}}'.encode(),
                           headers={"content-type": "application/json"}), "nested deeper")
        refused(client.put("/v1/config", content=f"tags = {nested}\n".encode(),
                           headers={"content-type": "application/toml"}), "nested deeper")
        # Still serving, and a body of ordinary depth still applies.
        assert client.patch("/v1/config", json={"top-p": 0.9}).status_code == 200
    with running.client() as public:
        assert public.get("/health").status_code == 200
