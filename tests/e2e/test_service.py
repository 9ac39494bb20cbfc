"""Service integration: the sd_notify sequence a real daemon sends to a fake NOTIFY_SOCKET through a SIGHUP reload,
an admin change and a stop; and `systemd-analyze verify` on the shipped units."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.e2e.admin_harness import admin, short_dir, wait_for
from tests.e2e.conftest import BIN, launch

ROOT = Path(__file__).resolve().parents[2]


class FakeNotifySocket:
    """A Unix datagram socket standing in for systemd's; records every notification with what the log held then."""

    def __init__(self, path: Path, log_path: Path) -> None:
        self.path = path
        self.log_path = log_path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.messages: list[dict[str, str]] = []
        self.log_at_first_ready: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            if "READY" in fields and self.log_at_first_ready is None:
                self.log_at_first_ready = self.log_path.read_text(errors="replace")
            self.messages.append(fields)

    def kinds(self) -> list[str]:
        """The state notifications in order (WATCHDOG and bare STATUS left out)."""
        return [k for m in self.messages for k in ("READY", "RELOADING", "STOPPING") if k in m]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@pytest.fixture
def notify(tmp_path: Path) -> Iterator[tuple[FakeNotifySocket, Path]]:
    home = short_dir()
    fake = FakeNotifySocket(home / "notify.sock", home / "mlxd.log")
    yield fake, home
    fake.close()
    shutil.rmtree(home, ignore_errors=True)


def test_notifications_through_reload_admin_change_and_stop(tiny_checkpoint: Path,
                                                            notify: tuple[FakeNotifySocket, Path]) -> None:
    fake, home = notify
    toml, sock = home / "mlxd.toml", home / "admin.sock"
    toml.write_text("temperature = 0.5\n")
    env = {"NOTIFY_SOCKET": str(fake.path), "WATCHDOG_USEC": "400000"}
    running = launch(["-m", str(tiny_checkpoint), "--host", "127.0.0.1", "--port", "0", "--config", str(toml),
                      "--no-watch-config", "--admin-listen", f"unix:{sock}"], home / "mlxd.log", env=env)
    try:
        wait_for(lambda: "READY" in fake.kinds(), 10, "READY=1")
        # READY=1 only once listening and with the model loaded.
        assert fake.log_at_first_ready and "listening on" in fake.log_at_first_ready
        assert "loaded in" in fake.log_at_first_ready
        wait_for(lambda: any("WATCHDOG" in m for m in fake.messages), 10, "WATCHDOG=1")

        toml.write_text("temperature = 0.6\n")
        running.process.send_signal(signal.SIGHUP)
        wait_for(lambda: fake.kinds().count("READY") == 2, 10, "READY=1 after the SIGHUP reload")
        with admin(sock) as client:
            assert client.get("/v1/status").json()["generation"] == 2
            assert client.patch("/v1/config", json={"top-k": 5}).status_code == 200
        wait_for(lambda: fake.kinds().count("READY") == 3, 10, "READY=1 after the admin change")

        assert running.stop(signal.SIGTERM) == 0
        assert fake.kinds() == ["READY", "RELOADING", "READY", "RELOADING", "READY", "STOPPING"]
        reloading = [m for m in fake.messages if "RELOADING" in m]
        now_usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        assert all(0 < int(m["MONOTONIC_USEC"]) <= now_usec for m in reloading)
        assert all("STATUS" in m for m in fake.messages if "READY" in m or "STOPPING" in m)
    finally:
        running.stop(signal.SIGKILL)


def test_the_admin_api_answers_draining_during_a_stop(tiny_checkpoint: Path) -> None:
    home = short_dir()
    sock = home / "admin.sock"
    running = launch(["-m", str(tiny_checkpoint), "--host", "127.0.0.1", "--port", "0", "--ctx-size", "8192",
                      "--shutdown-timeout", "2", "--admin-listen", f"unix:{sock}"], home / "mlxd.log")
    streaming = threading.Event()

    def endless() -> None:
        body = {"prompt": "Once upon a time", "n_predict": -1, "ignore_eos": True, "stream": True}
        try:
            with running.client() as client, client.stream("POST", "/completion", json=body) as response:
                for line in response.iter_lines():
                    if line.startswith("data:"):
                        streaming.set()
        except httpx.HTTPError:
            pass  # cut when the drain times out: that is the point of the timeout

    reader = threading.Thread(target=endless, daemon=True)
    try:
        reader.start()
        assert streaming.wait(30)
        with admin(sock) as client:
            running.process.send_signal(signal.SIGTERM)
            wait_for(lambda: client.get("/v1/status").json()["state"] == "draining", 5, "the draining state")
            refused = client.patch("/v1/config", json={"top-k": 3})
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "unavailable"
        assert running.process.wait(30) == 0
    finally:
        running.stop(signal.SIGKILL)
        reader.join(10)
        shutil.rmtree(home, ignore_errors=True)


def _systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("systemd-analyze is missing and the systemd package cannot be installed (not root or no apt)")
    done = subprocess.run(["apt-get", "install", "-y", "-qq", "systemd"], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    found = shutil.which("systemd-analyze")
    if not found:
        pytest.skip(f"installing the systemd package failed: {done.stderr.strip()[-300:]}")
    return found


def test_systemd_analyze_verify_accepts_the_units(tmp_path: Path) -> None:
    analyze = _systemd_analyze()
    mlxd = BIN / "mlxd"
    assert mlxd.exists(), f"{mlxd} is not installed in this environment ({sys.executable})"
    units = []
    for name in ("mlxd.service", "mlxd@.service"):
        text = (ROOT / "systemd" / name).read_text()
        assert "Type=notify" in text and "ExecReload=/bin/kill -HUP $MAINPID" in text
        # verify checks that ExecStart's program exists: point it at this environment's mlxd.
        copy = tmp_path / name.replace("@.", "@example.")
        copy.write_text(text.replace("/opt/mlxd/.venv/bin/mlxd", str(mlxd)))
        units.append(str(copy))
    done = subprocess.run([analyze, "verify", *units], capture_output=True, text=True, timeout=120)
    complaints = [line for line in (done.stdout + done.stderr).splitlines() if str(tmp_path) in line
                  or "mlxd" in line]
    assert done.returncode == 0 and not complaints, done.stdout + done.stderr
