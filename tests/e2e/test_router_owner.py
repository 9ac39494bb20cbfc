"""Router mode's own pool changes go through the one writer: an on-demand load and an idle unload each commit a
generation published on the admin API's /v1/events; a failed on-demand load is refused there (the request gets its
error, the entry shows failed) and changes nothing else."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any, Callable

import httpx

from tests.e2e.admin_harness import admin, short_dir, wait_for
from tests.e2e.conftest import RunningServer

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


class Events:
    """The admin event stream, read on a thread from the moment it is connected."""

    def __init__(self, sock: Path) -> None:
        self.seen: list[dict[str, Any]] = []
        self.connected = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, args=(sock,), daemon=True)
        self._thread.start()
        assert self.connected.wait(30)

    def _follow(self, sock: Path) -> None:
        with admin(sock) as client, client.stream("GET", "/v1/events", timeout=httpx.Timeout(60)) as response:
            for line in response.iter_lines():
                if line.startswith(": connected"):
                    self.connected.set()
                elif line.startswith("data: "):
                    self.seen.append(json.loads(line[len("data: "):]))
                if self._stop.is_set():
                    return

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in list(self.seen) if e["type"] == kind]

    def close(self) -> None:
        self._stop.set()


def test_on_demand_load_failed_load_and_idle_unload_are_changes_of_the_one_writer(
        start_server: Callable[..., RunningServer], tmp_path: Path, tiny_checkpoint: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    for name in ("alpha", "beta"):
        shutil.copytree(tiny_checkpoint, models / name)
    (models / "broken").mkdir()
    (models / "broken" / "config.json").write_text("{not json")
    (tmp_path / "store").mkdir()
    (tmp_path / "presets.ini").write_text("[beta]\nsleep-idle-seconds = 1\n")
    sock = short_dir() / "admin.sock"
    running = start_server("--models-dir", str(models), "--models-preset", str(tmp_path / "presets.ini"),
                           "--models-max", "0", "--model-store-root", str(tmp_path / "store"),
                           "--admin-listen", f"unix:{sock}", model=False)
    events = Events(sock)
    try:
        with admin(sock) as control, running.client() as client:
            start = control.get("/v1/status").json()["generation"]

            # A request naming an unloaded model loads it: one generation, once the model is installed.
            assert client.post("/v1/chat/completions", json={**CHAT, "model": "alpha"}).status_code == 200
            status = control.get("/v1/status").json()
            assert status["generation"] == start + 1
            committed = wait_for(lambda: events.of("committed"), 30, "the on-demand load's event")
            assert [(e["generation"], e["trigger"], e["changed"]) for e in committed] == [
                (start + 1, "router:on-demand", ["models/alpha"])]

            # A model that cannot load: the request gets the error, the change is refused (last_error, a refused
            # event), the generation stays and alpha keeps serving.
            failed = client.post("/v1/chat/completions", json={**CHAT, "model": "broken"})
            assert failed.status_code == 500 and "model name=broken failed to load" in failed.text
            status = control.get("/v1/status").json()
            assert status["generation"] == start + 1
            assert status["last_error"]["trigger"] == "router:on-demand"
            assert "broken" in status["last_error"]["message"]
            assert {m["name"]: m["state"] for m in status["models"]} == {
                "alpha": "loaded", "beta": "unloaded", "broken": "failed"}
            refused = wait_for(lambda: events.of("refused"), 30, "the failed load's refusal")
            assert refused[0]["trigger"] == "router:on-demand" and refused[0]["generation"] == start + 1

            # beta idles out after its sleep-idle-seconds: the unload is a generation too, and clears last_error.
            assert client.post("/v1/chat/completions", json={**CHAT, "model": "beta"}).status_code == 200
            idle = wait_for(lambda: [e for e in events.of("committed") if e["trigger"] == "router:idle"], 60,
                            "the idle unload's event")
            assert idle[0]["generation"] == start + 3 and idle[0]["changed"] == ["models/beta"]
            status = control.get("/v1/status").json()
            assert status["generation"] == start + 3 and status["last_error"] is None
            assert {m["name"]: m["state"] for m in status["models"]}["beta"] == "unloaded"
            assert {m["name"]: m["state"] for m in status["models"]}["alpha"] == "loaded"
            assert [e["trigger"] for e in events.of("committed")] == [
                "router:on-demand", "router:on-demand", "router:idle"]
    finally:
        events.close()
