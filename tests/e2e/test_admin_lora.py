"""LoRA scales through the admin API and `mlxd admin lora`: live state of the loaded model, one generation each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from mlxd.engine.synth_lora import make_adapter
from tests.e2e.admin_harness import admin, mlxd_admin, short_dir
from tests.e2e.conftest import RunningServer


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
        assert answer.status_code == 200 and answer.json()["changed"] == ["lora-scales"], answer.text
        after = client.get("/v1/status").json()
        assert after["generation"] == before["generation"] + 1 and after["config_hash"] == before["config_hash"]
        assert client.get("/v1/lora").json()["adapters"][0]["scale"] == 0.5
        assert public.get("/lora-adapters").json()[0]["scale"] == 0.5
        unknown = client.put("/v1/lora", json={"other": 1.0})
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_adapter"
        bad = client.put("/v1/lora", json={"0": "loud"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_body"
    done = mlxd_admin(sock, "lora", "0=0")
    assert done.returncode == 0, done.stderr
    shown = mlxd_admin(sock, "lora", "--json")
    assert json.loads(shown.stdout)["adapters"][0]["scale"] == 0.0
    assert Path(adapter).name in mlxd_admin(sock, "lora").stdout
