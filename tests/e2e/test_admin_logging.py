"""Logging, live: --log-file and the log options change through the admin API and take effect on the next line;
every secret (API keys, key file contents, hf token, admin token) is redacted from every line."""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests.e2e.admin_harness import admin, short_dir, wait_for
from tests.e2e.conftest import BIN, RunningServer

SECRETS = {
    "api-key": "sk-cli-key-0123456789",
    "api-key-file": "sk-file-key-9876543210",
    "hf-token": "hf_tokenABCDEFGHIJKL",
    "admin-token": "admin-secret-token-42",
}


@pytest.fixture(scope="module")
def daemon(tiny_checkpoint: Path) -> Iterator[tuple[RunningServer, Path, Path]]:
    home = short_dir()
    sock, log_file = home / "admin.sock", home / "mlxd.log"
    (home / "keys").write_text(f"# keys\n{SECRETS['api-key-file']}\n")
    (home / "token").write_text(SECRETS["admin-token"])
    argv = [str(BIN / "mlxd-server"), "-m", str(tiny_checkpoint), "--host", "127.0.0.1", "--port", "0",
            "--api-key", SECRETS["api-key"], "--api-key-file", str(home / "keys"), "--hf-token", SECRETS["hf-token"],
            "--admin-listen", f"unix:{sock}", "--admin-token-file", str(home / "token"), "--log-file", str(log_file),
            "--log-verbosity", "4"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_ARG_", "MLXD_"))}
    with open(home / "stdout.log", "wb") as out:  # with --log-file, stdout and stderr carry nothing
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    running = RunningServer(process, home / "stdout.log", argv=argv)
    try:
        # The public listener logs first; the admin socket this module talks to exists once the admin one has.
        wait_for(lambda: "admin listening on" in _read(log_file) or process.poll() is not None, 60,
                 "the daemon's admin listener")
        assert process.poll() is None, running.log()
        running.base_url = re.search(r"(?<!admin )listening on (\S+)", _read(log_file)).group(1)
        with admin(sock, SECRETS["admin-token"]) as client:
            wait_for(lambda: client.get("/v1/status").json()["state"] == "serving", 60, "the daemon to serve")
    except BaseException:
        running.stop(signal.SIGKILL)  # a failed setup leaves no daemon behind
        raise
    yield running, sock, log_file
    assert running.stop() == 0, running.log() + _read(log_file)[-3000:]
    shutil.rmtree(home, ignore_errors=True)


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def test_the_log_file_is_private(daemon: tuple[RunningServer, Path, Path]) -> None:
    _, _, log_file = daemon
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o600
    assert "listening on" in _read(log_file)


def test_every_secret_is_redacted_from_every_line(daemon: tuple[RunningServer, Path, Path]) -> None:
    running, sock, log_file = daemon
    every = "-".join(SECRETS.values())
    with admin(sock, SECRETS["admin-token"]) as client:
        # Lines that would carry each secret: a refused model path, an admin path, a bad value.
        refused = client.patch("/v1/config", json={"model": f"/nonexistent/{every}"})
        assert refused.status_code == 422
        client.get(f"/v1/{every}")
        client.patch("/v1/config", json={"alias": f"{every}", "n-predict": "x"})
        shown = client.get("/v1/config").text + client.get("/v1/status").text + refused.text
        assert not [name for name, secret in SECRETS.items() if secret in shown], [
            shown[max(0, shown.find(v) - 300):shown.find(v) + 50] for v in SECRETS.values() if v in shown]
    with running.client() as public:
        public.get("/health", headers={"Authorization": f"Bearer {SECRETS['api-key']}"})
        public.get(f"/{every}")
    wait_for(lambda: "GET /v1/config" in _read(log_file), 10, "the log line of the last admin call")
    text = _read(log_file) + running.log()
    assert "/nonexistent/***" in text
    assert not [name for name, secret in SECRETS.items() if secret in text]


def test_log_options_apply_on_the_next_line(daemon: tuple[RunningServer, Path, Path]) -> None:
    _, sock, log_file = daemon
    with admin(sock, SECRETS["admin-token"]) as client:
        changed = client.put("/v1/logging", json={"log-timestamps": True, "log-prefix": True})
        assert changed.status_code == 200, changed.text
        client.get("/v1/status")
        line = wait_for(lambda: [ln for ln in _read(log_file).splitlines() if "GET /v1/status" in ln], 10,
                        "the status line")[-1]
        assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} I mlxd\.admin: GET /v1/status -> 200", line), line
        options = client.get("/v1/logging").json()["options"]
        assert options["log-timestamps"] == {"value": True, "source": "admin"}
        assert client.put("/v1/logging", json={"log-timestamps": False, "log-prefix": False}).status_code == 200


def test_log_file_moves_live_and_refuses_a_symlink(daemon: tuple[RunningServer, Path, Path]) -> None:
    _, sock, log_file = daemon
    home = log_file.parent
    moved = home / "moved.log"
    link = home / "link.log"
    os.symlink(home / "elsewhere.log", link)
    with admin(sock, SECRETS["admin-token"]) as client:
        refused = client.put("/v1/logging", json={"log-file": str(link)})
        assert refused.status_code == 422 and "symbolic link" in refused.json()["error"]["message"]
        assert not (home / "elsewhere.log").exists()
        assert client.put("/v1/logging", json={"log-file": str(moved)}).status_code == 200
        client.get("/v1/status")
        wait_for(lambda: "GET /v1/status" in _read(moved), 10, "a line in the new log file")
        assert stat.S_IMODE(moved.stat().st_mode) == 0o600
        assert client.put("/v1/logging", json={"log-file": str(log_file)}).status_code == 200


def test_log_disable_silences_the_next_line(daemon: tuple[RunningServer, Path, Path]) -> None:
    _, sock, log_file = daemon
    with admin(sock, SECRETS["admin-token"]) as client:
        assert client.put("/v1/logging", json={"log-disable": True}).status_code == 200
        size = log_file.stat().st_size
        client.get("/v1/config/nothing-here")
        assert log_file.stat().st_size == size
        assert client.put("/v1/logging", json={"log-disable": False}).status_code == 200
        client.get("/v1/status")
        wait_for(lambda: log_file.stat().st_size > size, 10, "logging to resume")
