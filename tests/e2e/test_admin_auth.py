"""Who may reach the admin API: not the public port; over TCP only with the bearer token; startup refuses a TCP
admin listener without a token file and a Unix socket another daemon holds."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.e2e.admin_harness import short_dir
from tests.e2e.conftest import BIN, RunningServer, launch

TOKEN = "adm1n-t0ken-for-tests"


@pytest.fixture(scope="module")
def tcp_daemon(tiny_checkpoint: Path) -> Iterator[tuple[RunningServer, str]]:
    home = short_dir()
    token_file = home / "token"
    token_file.write_text(TOKEN + "\n")
    running = launch(["-m", str(tiny_checkpoint), "--host", "127.0.0.1", "--port", "0",
                      "--admin-listen", "127.0.0.1:0", "--admin-token-file", str(token_file)], home / "mlxd.log")
    match = re.search(r"admin listening on (http://\S+)", running.log())
    assert match, running.log()
    yield running, match.group(1)
    assert running.stop() == 0
    shutil.rmtree(home, ignore_errors=True)


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN},
                                     {"Authorization": f"Basic {TOKEN}"}])
def test_a_missing_or_wrong_token_is_refused(tcp_daemon: tuple[RunningServer, str], headers: dict) -> None:
    _, url = tcp_daemon
    for method, path in (("GET", "/v1/status"), ("PATCH", "/v1/config"), ("POST", "/v1/reload")):
        answer = httpx.request(method, url + path, headers=headers, json={"top-k": 3})
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "unauthorized"


def test_the_right_token_is_accepted(tcp_daemon: tuple[RunningServer, str]) -> None:
    running, url = tcp_daemon
    answer = httpx.get(url + "/v1/status", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200 and answer.json()["state"] == "serving"
    assert TOKEN not in running.log()


def test_the_public_port_has_no_admin_routes(tcp_daemon: tuple[RunningServer, str]) -> None:
    running, _ = tcp_daemon
    with running.client(headers={"Authorization": f"Bearer {TOKEN}"}) as public:
        for method, path in (("GET", "/v1/status"), ("GET", "/v1/config"), ("PATCH", "/v1/config"),
                             ("POST", "/v1/reload"), ("GET", "/v1/events"), ("GET", "/v1/logging")):
            answer = public.request(method, path)
            assert answer.status_code == 404, (method, path)
            assert answer.json() == {"error": {"message": "File Not Found", "type": "not_found_error",
                                               "code": 404}}


def _start_fails(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "mlxd-server"), *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def test_a_tcp_admin_listener_needs_a_token_file(tiny_checkpoint: Path) -> None:
    done = _start_fails(["-m", str(tiny_checkpoint), "--port", "0", "--admin-listen", "127.0.0.1:0"])
    assert done.returncode == 2
    assert "admin-listen" in done.stderr and "--admin-token-file" in done.stderr


def test_a_socket_in_use_is_not_taken_over(tiny_checkpoint: Path) -> None:
    home = short_dir()
    sock = home / "admin.sock"
    holder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        holder.bind(str(sock))
        holder.listen(1)
        done = _start_fails(["-m", str(tiny_checkpoint), "--port", "0", "--admin-listen", f"unix:{sock}"])
        assert done.returncode == 2 and "another process is listening there" in done.stderr
        assert sock.exists()
    finally:
        holder.close()
        shutil.rmtree(home, ignore_errors=True)
