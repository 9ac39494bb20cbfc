"""The attack's smaller findings, each pinned: a slot saved onto a directory, a request that can never fit, the
from-args secrets, the admin socket in a directory others can write, and persist's orphaned temporary files."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlxd.admin.persist import clean_orphans, write_atomically
from mlxd.config import Config
from tests.e2e.admin_harness import mlxd_admin, short_dir
from tests.e2e.api_harness import AppServer, serving_in_process
from tests.e2e.conftest import BIN


@pytest.fixture(scope="module")
def app(tiny_model: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppServer]:
    slots = tmp_path_factory.mktemp("slots")
    config = Config(parallel=2, ctx_size=512, slot_save_path=str(slots))
    with serving_in_process(tiny_model, ctx_size=512, config=config) as server:
        yield server


def test_saving_a_slot_onto_a_directory_is_a_400(app: AppServer) -> None:
    (Path(app.state.config.slot_save_path) / "taken").mkdir()
    with app.client() as client:
        response = client.post("/slots/0", params={"action": "save"}, json={"filename": "taken"})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["type"] == "invalid_request_error"
        assert client.post("/slots/0", params={"action": "save"}, json={"filename": "free"}).status_code == 200


def test_a_request_that_can_never_fit_is_a_400_not_retry_later(app: AppServer) -> None:
    with app.client() as client:
        response = client.post("/completion", json={"prompt": ["Hi"] * 300, "n_predict": 1})
        assert response.status_code == 400, response.text
        assert "300 generations" in response.json()["error"]["message"]
        # Nothing was queued: a request that fits is served at once.
        assert client.post("/completion", json={"prompt": ["Hi"] * 3, "n_predict": 1}).status_code == 200


def test_from_args_redacts_secrets_unless_asked() -> None:
    args = ["--", "--api-key", "sk-canary-42", "-hft", "hf_canary_42", "-c", "128"]
    shown = subprocess.run([str(BIN / "mlxd"), "config", "from-args", *args], capture_output=True, text=True,
                           timeout=60, check=True).stdout
    assert "sk-canary-42" not in shown and "hf_canary_42" not in shown and "<redacted>" in shown
    assert "ctx-size = 128" in shown
    clear = subprocess.run([str(BIN / "mlxd"), "config", "from-args", "--show-secrets", *args],
                           capture_output=True, text=True, timeout=60, check=True).stdout
    assert "sk-canary-42" in clear


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A short-named directory anyone may write into."""
    directory = Path(tempfile.mkdtemp(prefix="mlxd-o-"))
    directory.chmod(0o777)
    yield directory
    for child in directory.iterdir():
        child.unlink()
    directory.rmdir()


def test_the_daemon_refuses_an_admin_socket_in_a_directory_others_can_write(open_dir: Path,
                                                                             tiny_checkpoint: Path) -> None:
    done = subprocess.run([str(BIN / "mlxd-server"), "-m", str(tiny_checkpoint), "--port", "0", "--admin-listen",
                           f"unix:{open_dir / 'admin.sock'}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "writable by everyone" in done.stderr
    assert not (open_dir / "admin.sock").exists()


def test_the_admin_client_refuses_a_socket_in_a_directory_others_can_write(open_dir: Path) -> None:
    path = open_dir / "admin.sock"
    impostor = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    impostor.bind(str(path))
    impostor.listen(1)
    answered, stop = threading.Event(), threading.Event()

    def answer() -> None:  # what an impostor would say, were it asked
        impostor.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = impostor.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            answered.set()
            conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n{"state": "serving"}')
            conn.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        done = mlxd_admin(path, "status")
        assert done.returncode != 0 and "refusing to trust the admin socket" in done.stderr, done
        assert not answered.is_set()
    finally:
        stop.set()
        thread.join(5)
        impostor.close()


def test_the_client_still_trusts_a_private_socket_directory() -> None:
    directory = short_dir()
    done = mlxd_admin(directory / "admin.sock", "status")
    assert "refusing to trust" not in done.stderr and "cannot reach" in done.stderr
    directory.rmdir()


def test_persist_cleans_the_temporary_files_a_kill_left(tmp_path: Path) -> None:
    target = tmp_path / "mlxd.toml"
    target.write_text('ctx-size = 512\n', encoding="utf-8")
    stale = [tmp_path / ".mlxd.toml.mlxd-abc123.tmp", tmp_path / ".mlxd-k2j4h5g6.toml"]  # ours, an older mlxd's
    fresh = tmp_path / ".mlxd.toml.mlxd-fresh1.tmp"
    unrelated = tmp_path / ".other.toml"
    for path in (*stale, fresh, unrelated):
        path.write_text("half a write", encoding="utf-8")
    old = time.time() - 3600
    for path in (*stale, unrelated):
        os.utime(path, (old, old))

    assert sorted(clean_orphans(str(target))) == sorted(str(p) for p in stale)
    assert fresh.exists() and unrelated.exists()  # a write may be in progress; not ours at all
    write_atomically(str(target), 'ctx-size = 1024\n')
    assert target.read_text(encoding="utf-8") == 'ctx-size = 1024\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([target.name, fresh.name, unrelated.name])
