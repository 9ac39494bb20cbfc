"""The public surface's options through a real ``mlxd-server``: command line and environment reach the app."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import time

import httpx

from tests.e2e.conftest import RunningServer

Start = Callable[..., RunningServer]


def test_default_server_surface(server: RunningServer) -> None:
    with server.client() as client:
        assert client.get("/health").json() == {"status": "ok"}
        assert client.get("/metrics").status_code == 501  # --metrics is off by default
        assert client.post("/props", json={}).status_code == 501  # --props is off by default
        assert client.get("/slots").status_code == 200  # --slots is on by default
        assert client.get("/no-such-route").json()["error"]["type"] == "not_found_error"
    # The serving stack's objects were frozen out of full garbage collections before the model loaded.
    frozen = re.search(r"(\d+) objects of the serving stack kept out of full garbage collections", server.log())
    assert frozen and int(frozen.group(1)) > 10_000, server.log()


def test_options_from_the_command_line(start_server: Start, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# ops\nfrom-file\n")
    running = start_server("--api-key", "k1,k2", "--api-key-file", str(keys), "--api-prefix", "/llm", "--metrics",
                           "--props", "--no-slots", "--slot-save-path", str(tmp_path / "slots"), wait_ready=False)
    with httpx.Client(base_url=running.base_url, timeout=30) as client:
        deadline = time.monotonic() + 120  # the fixture's readiness probe does not know the prefix
        while client.get("/llm/health").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert client.get("/llm/health").status_code == 200
        assert client.get("/health").status_code in (401, 404)
        assert client.get("/llm/props").status_code == 401
        auth = {"Authorization": "Bearer k2"}
        assert client.get("/llm/props", headers=auth).json()["endpoint_metrics"] is True
        assert client.get("/llm/props", headers={"X-Api-Key": "from-file"}).status_code == 200
        assert client.get("/llm/metrics", headers=auth).text.startswith("# HELP llamacpp:prompt_tokens_total")
        assert client.post("/llm/props", json={}, headers=auth).json() == {"success": True}
        assert client.get("/llm/slots", headers=auth).status_code == 501
        invalid = client.post("/llm/slots/0", params={"action": "save"}, json={"filename": "../x"}, headers=auth)
        assert invalid.status_code == 400 and invalid.json()["error"]["message"] == "Invalid filename"


def test_api_key_from_the_environment(start_server: Start) -> None:
    running = start_server(env={"LLAMA_API_KEY": "env-key"})
    with running.client() as client:
        assert client.get("/health").status_code == 200
        assert client.get("/v1/models").status_code == 401
        assert client.get("/v1/models", headers={"Authorization": "Bearer env-key"}).status_code == 200


def _wait_healthy(client: httpx.Client, path: str = "/health") -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if client.get(path).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("the server did not become healthy")


def test_unix_socket_host(start_server: Start, tmp_path: Path) -> None:
    sock = tmp_path / "mlxd.sock"
    running = start_server("--host", str(sock), wait_ready=False)
    assert "unix" in running.base_url
    transport = httpx.HTTPTransport(uds=str(sock))
    with httpx.Client(transport=transport, base_url="http://mlxd", timeout=30) as client:
        _wait_healthy(client)
        assert client.post("/tokenize", json={"content": "over a socket"}).json()["tokens"]


def test_tls_with_key_and_certificate(start_server: Start, tmp_path: Path) -> None:
    import ssl
    import subprocess

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    running = start_server("--ssl-key-file", str(key), "--ssl-cert-file", str(cert), wait_ready=False)
    assert running.base_url.startswith("https://")
    with httpx.Client(base_url=running.base_url, verify=ssl.create_default_context(cafile=str(cert)), timeout=30) as client:
        _wait_healthy(client)
        assert client.get("/v1/models").json()["object"] == "list"
