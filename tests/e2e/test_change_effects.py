"""What a change does comes from the option table: one test per effect class, with requests running throughout,
and files that parse to nothing (empty, truncated, or without the model) refused like any bad configuration."""

from __future__ import annotations

import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from tests.e2e.admin_harness import admin, mlxd_admin, short_dir, wait_for
from tests.e2e.conftest import RunningServer, launch

STREAMS = 4
BODY = {"prompt": "Once upon a time", "n_predict": 8, "ignore_eos": True, "temperature": 0}


class Load:
    """STREAMS clients sending completions back to back until stopped; every failure is kept."""

    def __init__(self, running: RunningServer) -> None:
        self.running = running
        self.stop = threading.Event()
        self.done = [0] * STREAMS
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(STREAMS)]

    def _run(self, i: int) -> None:
        with self.running.client(timeout=120) as client:
            while not self.stop.is_set():
                try:
                    answer = client.post("/completion", json=BODY)
                    if answer.status_code != 200 or answer.json()["tokens_predicted"] != BODY["n_predict"]:
                        self.errors.append(f"{answer.status_code}: {answer.text[:200]}")
                    self.done[i] += 1
                except httpx.HTTPError as exc:
                    self.errors.append(f"{type(exc).__name__}: {exc}")

    def __enter__(self) -> "Load":
        for thread in self.threads:
            thread.start()
        wait_for(lambda: min(self.done) >= 1, 120, "every client to finish a request")
        return self

    def mark(self) -> list[int]:
        return list(self.done)

    def passed(self, mark: list[int]) -> bool:
        """Whether every client finished another request since ``mark``."""
        return all(now > then for now, then in zip(self.done, mark))

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(120)


@pytest.fixture(scope="module")
def daemon(tiny_checkpoint: Path) -> Iterator[tuple[RunningServer, Path, Path]]:
    home = short_dir()
    sock, toml = home / "admin.sock", home / "mlxd.toml"
    # The model comes last, so that a truncated write loses it first.
    toml.write_text(f'ctx-size = 512\ntemperature = 0.5\nparallel = {STREAMS}\nmodel = "{tiny_checkpoint}"\n')
    running = launch(["--host", "127.0.0.1", "--port", "0", "--config", str(toml), "--metrics", "--admin-listen",
                      f"unix:{sock}"], home / "mlxd.log")
    yield running, sock, toml
    assert running.stop() == 0
    shutil.rmtree(home, ignore_errors=True)


def _loads(running: RunningServer) -> int:
    return running.log().count(" loaded in ")


def _metrics(public: httpx.Client) -> dict[str, str]:
    """``/metrics`` samples of the mlxd_config_* families: sample with labels -> value."""
    lines = [line.rsplit(" ", 1) for line in public.get("/metrics").text.splitlines()
             if line.startswith("mlxd_config_")]
    return {sample: value for sample, value in lines}


def test_one_change_per_effect_class_under_load(daemon: tuple[RunningServer, Path, Path]) -> None:
    running, sock, _ = daemon
    with admin(sock) as client, running.client() as public, Load(running) as load:
        # live, set from the command line: applies to the next request, nothing is loaded again.
        loads = _loads(running)
        done = mlxd_admin(sock, "config", "temperature=0.25")
        assert done.returncode == 0 and "changed temperature" in done.stdout, done.stderr
        assert public.get("/props").json()["default_generation_settings"]["params"]["temperature"] == 0.25
        assert _loads(running) == loads
        status = client.get("/v1/status").json()
        assert _metrics(public) == {f'mlxd_config_info{{config_hash="{status["config_hash"]}"}}': "1",
                                    "mlxd_config_generation": str(status["generation"]),
                                    'mlxd_config_last_change{result="committed"}': "1"}

        # reload: a new worker with the new context loads before the old one drains; no request fails.
        mark = load.mark()
        answer = client.patch("/v1/config", json={"ctx-size": 1024}).json()
        assert answer["applied"] and answer["changed"] == ["ctx-size"], answer
        wait_for(lambda: _loads(running) == loads + 1, 30, "the reload")
        assert public.get("/props").json()["default_generation_settings"]["n_ctx"] == 1024 // STREAMS  # per slot
        wait_for(lambda: load.passed(mark), 60, "requests on the new model")

        # restart: reported as pending; the live part of the same change still applies.
        answer = client.patch("/v1/config", json={"port": 1, "top-k": 9}).json()
        assert answer["applied"] and answer["pending_restart"] == ["port"], answer
        assert client.get("/v1/status").json()["pending_restart"] == ["port"]
        assert public.get("/props").json()["default_generation_settings"]["params"]["top_k"] == 9
        assert client.put("/v1/config", json={}).status_code == 200  # back to the file's values
        assert client.get("/v1/status").json()["pending_restart"] == []
    assert load.errors == []


@pytest.mark.parametrize("text, needle", [
    ("", "the file is empty"),  # truncated to nothing
    ("ctx-size = 512\ntemperature = 0.", "mlxd.toml"),  # truncated in the middle of a value
    ("ctx-size = 512\ntemperature = 0.5\nparallel = 4\n", "names no model"),  # truncated before the model line
])
def test_a_file_that_parses_to_nothing_changes_nothing_under_load(daemon: tuple[RunningServer, Path, Path],
                                                                  text: str, needle: str) -> None:
    running, sock, toml = daemon
    good = toml.read_text()
    with admin(sock) as client, running.client() as public, Load(running) as load:
        before = client.get("/v1/status").json()
        served = public.get("/v1/models").json()["data"][0]["id"]
        with open(toml, "w") as fh:  # an editor's truncate-then-write, stopped short
            fh.write(text)
        status = wait_for(lambda: (s := client.get("/v1/status").json())["last_error"] and s, 10, "the refusal")
        assert needle in status["last_error"]["message"] and status["last_error"]["trigger"].startswith("file:")
        first = status["last_error"]["time"]
        running.send_signal(signal.SIGHUP)  # SIGHUP reads the same file and refuses it the same way
        status = wait_for(lambda: (s := client.get("/v1/status").json())["last_error"]["time"] != first and s, 10,
                          "the SIGHUP refusal")
        assert status["last_error"]["trigger"] == "sighup" and needle in status["last_error"]["message"]
        assert (status["generation"], status["config_hash"]) == (before["generation"], before["config_hash"])
        assert public.get("/v1/models").json()["data"][0]["id"] == served
        assert _metrics(public)['mlxd_config_last_change{result="refused"}'] == "1"
        mark = load.mark()
        wait_for(lambda: load.passed(mark), 60, "requests served meanwhile")
        # The good file back: a change that succeeds (here, with nothing to change) clears last_error.
        tmp = toml.with_suffix(".new")
        tmp.write_text(good)
        os.replace(tmp, toml)
        wait_for(lambda: client.get("/v1/status").json()["last_error"] is None, 10, "last_error to clear")
    assert load.errors == []
