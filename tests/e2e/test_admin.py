"""The admin API against a real daemon on a Unix socket: status, config read/patch/replace/validate, If-Match,
models, logging, LoRA refusal, events, and the `mlxd admin` client."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.e2e.admin_harness import admin, mlxd_admin, short_dir, wait_for
from tests.e2e.conftest import BIN, RunningServer, launch


@pytest.fixture(scope="module")
def daemon(tiny_checkpoint: Path) -> Iterator[tuple[RunningServer, Path]]:
    home = short_dir()
    sock = home / "admin.sock"
    running = launch(["-m", str(tiny_checkpoint), "--host", "127.0.0.1", "--port", "0", "--ctx-size", "256",
                      "--admin-listen", f"unix:{sock}"], home / "mlxd.log")
    yield running, sock
    assert running.stop() == 0
    shutil.rmtree(home, ignore_errors=True)


def test_socket_is_private(daemon: tuple[RunningServer, Path]) -> None:
    _, sock = daemon
    mode = sock.stat().st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600


def test_status_json_from_the_client(daemon: tuple[RunningServer, Path], tiny_checkpoint: Path) -> None:
    _, sock = daemon
    done = mlxd_admin(sock, "status", "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["state"] == "serving"
    assert isinstance(status["generation"], int) and status["generation"] >= 1
    assert len(status["config_hash"]) == 64
    assert status["last_error"] is None and status["pending_restart"] == []
    assert {"name": str(tiny_checkpoint), "state": "loaded", "error": None} in status["models"]
    human = mlxd_admin(sock, "status")
    assert human.returncode == 0 and "generation" in human.stdout and "loaded" in human.stdout


def test_patch_is_an_admin_override_and_bumps_the_generation(daemon: tuple[RunningServer, Path]) -> None:
    _, sock = daemon
    with admin(sock) as client:
        before = client.get("/v1/status").json()
        answer = client.patch("/v1/config", json={"temperature": 0.25})
        assert answer.status_code == 200, answer.text
        assert answer.json()["applied"] and answer.json()["changed"] == ["temperature"]
        config = client.get("/v1/config")
        option = config.json()["options"]["temperature"]
        assert option == {"value": 0.25, "source": "admin"}
        assert config.json()["options"]["log-file"] == {"value": None, "source": "default"}
        assert config.headers["etag"].strip('"') == config.json()["etag"]
        after = client.get("/v1/status").json()
        assert after["generation"] == before["generation"] + 1
        assert after["config_hash"] != before["config_hash"]
        # The same value again is a no-op.
        again = client.patch("/v1/config", json={"temperature": 0.25}).json()
        assert not again["applied"] and again["generation"] == after["generation"]


def test_a_stale_if_match_is_refused(daemon: tuple[RunningServer, Path]) -> None:
    _, sock = daemon
    with admin(sock) as client:
        etag = client.get("/v1/config").headers["etag"]
        assert client.patch("/v1/config", json={"top-k": 7}, headers={"If-Match": etag}).status_code == 200
        stale = client.patch("/v1/config", json={"top-k": 9}, headers={"If-Match": etag})
        assert stale.status_code == 412
        assert stale.json()["error"]["code"] == "conflict"
        assert client.get("/v1/config").json()["options"]["top-k"]["value"] == 7


def test_validate_applies_nothing(daemon: tuple[RunningServer, Path]) -> None:
    _, sock = daemon
    with admin(sock) as client:
        before = client.get("/v1/status").json()
        ok = client.post("/v1/config/validate", json={"min-p": 0.1})
        assert ok.status_code == 200 and ok.json()["dry_run"] and ok.json()["changed"] == ["min-p"]
        bad = client.post("/v1/config/validate", json={"ctx-size": "many"})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "change_refused"
        assert "ctx-size" in bad.json()["error"]["message"]
        after = client.get("/v1/status").json()
        assert (after["generation"], after["config_hash"], after["last_error"]) == (
            before["generation"], before["config_hash"], before["last_error"])


def test_a_refused_patch_changes_nothing_and_is_recorded(daemon: tuple[RunningServer, Path]) -> None:
    running, sock = daemon
    with admin(sock) as client:
        before = client.get("/v1/status").json()
        refused = client.patch("/v1/config", json={"no-such-option": 1})
        assert refused.status_code == 422
        after = client.get("/v1/status").json()
        assert (after["generation"], after["config_hash"]) == (before["generation"], before["config_hash"])
        assert "no-such-option" in after["last_error"]["message"]
        assert "change refused" in running.log()
        # The next committed change clears it.
        assert client.patch("/v1/config", json={"top-k": 11}).status_code == 200
        assert client.get("/v1/status").json()["last_error"] is None


def test_put_replaces_the_admin_layer_with_a_toml_document(daemon: tuple[RunningServer, Path]) -> None:
    _, sock = daemon
    with admin(sock) as client:
        answer = client.put("/v1/config", content=b"repeat-penalty = 1.1\n",
                            headers={"Content-Type": "application/toml"})
        assert answer.status_code == 200, answer.text
        config = client.get("/v1/config").json()
        assert config["overrides"] == {"repeat-penalty": 1.1}
        # Earlier overrides are gone: the checkpoint's own value is served again.
        assert config["options"]["temperature"]["source"] == "checkpoint:generation_config.json"
        assert config["options"]["repeat-penalty"] == {"value": 1.1, "source": "admin"}


def test_logging_options_show_and_change(daemon: tuple[RunningServer, Path]) -> None:
    running, sock = daemon
    shown = mlxd_admin(sock, "logging", "--json")
    assert json.loads(shown.stdout)["options"]["log-prefix"] == {"value": False, "source": "default"}
    changed = mlxd_admin(sock, "logging", "log-prefix=true")
    assert changed.returncode == 0, changed.stderr
    with admin(sock) as client:
        assert client.get("/v1/logging").json()["options"]["log-prefix"] == {"value": True, "source": "admin"}
        client.get("/v1/status")
        refused = client.put("/v1/logging", json={"ctx-size": 512})
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "unknown_option"
    # The very next line carries llama.cpp's level prefix.
    assert "I mlxd.admin: GET /v1/status -> 200" in running.log()
    assert mlxd_admin(sock, "logging", "log-prefix=false").returncode == 0


def test_lora_scales_without_adapters(daemon: tuple[RunningServer, Path]) -> None:
    _, sock = daemon
    with admin(sock) as client:
        assert client.get("/v1/lora").json()["adapters"] == []
        answer = client.put("/v1/lora", json={"0": 0.5})
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "unknown_adapter"
    done = mlxd_admin(sock, "lora", "adapter=0.5")
    assert done.returncode == 1 and "unknown_adapter" in done.stderr


def test_unload_and_load_the_model(daemon: tuple[RunningServer, Path], tiny_checkpoint: Path) -> None:
    running, sock = daemon
    name = str(tiny_checkpoint)
    with admin(sock) as client, running.client() as public:
        assert client.post("/v1/models/nope/load").json()["error"]["code"] == "unknown_model"
        assert mlxd_admin(sock, "unload", name).returncode == 0
        assert public.get("/health").status_code == 503
        unloaded = {"name": name, "state": "unloaded", "error": None}
        assert client.get("/v1/models").json()["mode"] == "single"
        wait_for(lambda: unloaded in client.get("/v1/models").json()["models"], 10, "the unloaded state")
        assert mlxd_admin(sock, "load", name).returncode == 0
        assert public.get("/health").status_code == 200
        assert client.get("/v1/status").json()["models"] == [{"name": name, "state": "loaded", "error": None}]


def test_events_stream_a_committed_change(daemon: tuple[RunningServer, Path]) -> None:
    _, sock = daemon
    seen: list[dict] = []
    connected = threading.Event()

    def follow() -> None:
        with admin(sock) as client, client.stream("GET", "/v1/events", timeout=httpx.Timeout(30)) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if line.startswith(": connected"):
                    connected.set()
                if line.startswith("data: "):
                    seen.append(json.loads(line[6:]))
                    if seen[-1]["type"] == "committed":
                        return

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    assert connected.wait(30)
    with admin(sock) as client:
        generation = client.patch("/v1/config", json={"top-p": 0.9}).json()["generation"]
    reader.join(30)
    committed = [e for e in seen if e["type"] == "committed"]
    assert committed and committed[0]["generation"] == generation and committed[0]["changed"] == ["top-p"]


def test_unknown_endpoints_and_methods_use_the_admin_envelope(daemon: tuple[RunningServer, Path]) -> None:
    _, sock = daemon
    with admin(sock) as client:
        missing = client.get("/v1/nothing")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        wrong = client.delete("/v1/status")
        assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"
        bad = client.patch("/v1/config", content=b"[1, 2]")
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_body"


def test_persist_needs_a_config_file(daemon: tuple[RunningServer, Path]) -> None:
    _, sock = daemon
    with admin(sock) as client:
        answer = client.post("/v1/persist")
        assert answer.status_code == 409 and answer.json()["error"]["code"] == "no_config_file"


def test_null_removes_an_override(daemon: tuple[RunningServer, Path]) -> None:
    """``null`` in a PATCH (``mlxd admin config KEY=null``) drops the override: the files' value is back."""
    _, sock = daemon
    with admin(sock) as client:
        assert client.patch("/v1/config", json={"min-p": 0.2}).json()["applied"]
        assert client.get("/v1/config").json()["options"]["min-p"] == {"value": 0.2, "source": "admin"}
        done = mlxd_admin(sock, "config", "min-p=null")
        assert done.returncode == 0, done.stderr
        config = client.get("/v1/config").json()
        assert config["options"]["min-p"] == {"value": 0.05, "source": "default"}
        assert "min-p" not in config["overrides"]
        assert client.patch("/v1/config", json={"min-p": None}).json()["applied"] is False  # nothing to remove


def _closed_pipe_run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` with stdout on a pipe whose reader is already gone: every write fails with EPIPE, as after
    `| head -1` has read its line and exited."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(argv, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("command", [["status"], ["config", "--json"]], ids=["status", "config"])
def test_client_exits_quietly_on_a_closed_pipe(daemon: tuple[RunningServer, Path], command: list[str]) -> None:
    _, sock = daemon
    done = _closed_pipe_run([str(BIN / "mlxd"), "admin", "--admin-listen", f"unix:{sock}", *command])
    assert done.returncode == 0 and done.stderr == ""


def test_events_piped_to_head_exits_quietly(daemon: tuple[RunningServer, Path]) -> None:
    """`mlxd admin events | head -1`: the first event reaches head, the next write meets the closed pipe."""
    _, sock = daemon
    script = (f"{BIN / 'mlxd'} admin --admin-listen unix:{sock} events 2>{sock.parent / 'events.err'} | head -1; "
              "echo \"status=${PIPESTATUS[0]}\"")
    shell = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        with admin(sock) as client:
            for i in range(40):  # events until the client has met the closed pipe and exited
                client.patch("/v1/config", json={"top-k": 30 + i})
                if shell.poll() is not None:
                    break
                time.sleep(0.25)
        out, _ = shell.communicate(timeout=60)
    finally:
        if shell.poll() is None:
            shell.kill()
    lines = out.splitlines()
    assert len(lines) == 2 and lines[-1] == "status=0", out
    assert (sock.parent / "events.err").read_text() == ""
