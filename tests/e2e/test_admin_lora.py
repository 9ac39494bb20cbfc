"""LoRA scales through the admin API and `mlxd admin lora`: the admin layer's ``lora-scaled``, applied live to the
loaded adapters (no reload), one generation each, kept across file edits and SIGHUP, written by persist."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any, Callable

import pytest

from mlxd.dev.synth_lora import make_adapter
from tests.e2e.admin_harness import admin, mlxd_admin, short_dir, wait_for
from tests.e2e.conftest import RunningServer, launch


@pytest.fixture(scope="module")
def adapter(tiny_model: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(make_adapter(tiny_model.model, tmp_path_factory.mktemp("lora") / "style", seed=3))


def test_scales_change_through_the_admin_api(start_server: Callable[..., RunningServer], adapter: str) -> None:
    sock = short_dir() / "admin.sock"
    running = start_server("--lora", adapter, "--admin-listen", f"unix:{sock}")
    with admin(sock) as client, running.client() as public:
        before = client.get("/v1/status").json()
        assert client.get("/v1/lora").json()["adapters"] == [{"id": 0, "path": adapter, "scale": 1.0}]
        answer = client.put("/v1/lora", json={"style": 0.5})
        assert answer.status_code == 200 and "lora-scaled" in answer.json()["changed"], answer.text
        after = client.get("/v1/status").json()
        assert after["generation"] == before["generation"] + 1 and after["config_hash"] != before["config_hash"]
        assert client.get("/v1/lora").json()["adapters"][0]["scale"] == 0.5
        assert public.get("/lora-adapters").json()[0]["scale"] == 0.5
        unknown = client.put("/v1/lora", json={"other": 1.0})
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_adapter"
        bad = client.put("/v1/lora", json={"0": "loud"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_body"
        stale = client.put("/v1/lora", json={"0": 0.25}, headers={"If-Match": before["etag"]})
        assert stale.status_code == 412 and stale.json()["error"]["code"] == "conflict", stale.text
        current = client.get("/v1/status").json()["etag"]
        fresh = client.put("/v1/lora", json={"0": 0.25}, headers={"If-Match": current})
        assert fresh.status_code == 200 and client.get("/v1/lora").json()["adapters"][0]["scale"] == 0.25
    done = mlxd_admin(sock, "lora", "0=0")
    assert done.returncode == 0, done.stderr
    shown = mlxd_admin(sock, "lora", "--json")
    assert json.loads(shown.stdout)["adapters"][0]["scale"] == 0.0
    assert Path(adapter).name in mlxd_admin(sock, "lora").stdout


def _replace(path: Path, text: str) -> None:
    tmp = path.with_suffix(".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_a_scale_is_admin_config_that_survives_edits_sighup_and_persist(tiny_checkpoint: Path, adapter: str) -> None:
    home = short_dir()
    sock, toml = home / "admin.sock", home / "mlxd.toml"
    toml.write_text(f'model = "{tiny_checkpoint}"\nlora = ["{adapter}"]\ntemperature = 0.5\n')
    running = launch(["--host", "127.0.0.1", "--port", "0", "--config", str(toml), "--admin-listen", f"unix:{sock}"],
                     home / "mlxd.log")
    try:
        with admin(sock) as client, running.client() as public:
            before = client.get("/v1/status").json()
            assert client.put("/v1/lora", json={"0": 0.5}).status_code == 200
            option = client.get("/v1/config").json()["options"]["lora-scaled"]
            assert option == {**option, "value": [[adapter, 0.5]], "source": "admin"}  # typed (path, scale) pairs
            status = client.get("/v1/status").json()
            assert status["config_hash"] != before["config_hash"]
            # Live: the loaded adapters took the scale, the model was not loaded again.
            assert public.get("/lora-adapters").json()[0]["scale"] == 0.5
            assert running.log().count("loaded in") == 1 and "draining" not in running.log()

            # A file edit of another option keeps the admin layer; so does SIGHUP.
            _replace(toml, toml.read_text().replace("temperature = 0.5", "temperature = 0.75"))
            wait_for(lambda: client.get("/v1/status").json()["generation"] == status["generation"] + 1, 10.0,
                     "the edit to apply")
            assert public.get("/lora-adapters").json()[0]["scale"] == 0.5
            running.send_signal(signal.SIGHUP)
            wait_for(lambda: "sighup: no change" in running.log(), 10.0, "the SIGHUP reload")
            assert client.get("/v1/config").json()["options"]["lora-scaled"]["source"] == "admin"
            assert public.get("/lora-adapters").json()[0]["scale"] == 0.5
            # A change that reloads the model loads the adapters again from the same configuration: the scale too.
            assert client.patch("/v1/config", json={"ctx-size": 512}).json()["applied"]
            wait_for(lambda: running.log().count("loaded in") == 2, 30.0, "the reload")
            assert public.get("/lora-adapters").json()[0]["scale"] == 0.5

            # persist writes it into the file, which then owns it; the hash stays.
            written = client.post("/v1/persist").json()
            assert "lora-scaled" in written["written"], written
            option = client.get("/v1/config").json()["options"]["lora-scaled"]
            assert option["value"] == [[adapter, 0.5]] and option["source"].startswith(f"toml:{toml}")
            assert f'lora-scaled = [["{adapter}", 0.5]]' in toml.read_text()
            assert public.get("/lora-adapters").json()[0]["scale"] == 0.5
    finally:
        assert running.stop() == 0
        shutil.rmtree(home, ignore_errors=True)


def test_two_daemons_with_the_same_inputs_and_admin_calls_report_the_same_hash(
        start_server: Callable[..., RunningServer], adapter: str) -> None:
    hashes = []
    sock = short_dir() / "admin.sock"  # the admin address is part of the configuration: the same for both
    for _ in range(2):
        running = start_server("--lora", adapter, "--temp", "0.3", "--admin-listen", f"unix:{sock}")
        with admin(sock) as client:
            started = client.get("/v1/status").json()["config_hash"]
            assert client.put("/v1/lora", json={"0": 0.25}).status_code == 200
            assert client.patch("/v1/config", json={"top-k": 7}).status_code == 200
            hashes.append((started, client.get("/v1/status").json()["config_hash"]))
        assert running.stop() == 0
    assert hashes[0] == hashes[1] and hashes[0][0] != hashes[0][1]
