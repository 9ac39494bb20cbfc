"""Router mode against a real daemon: models loaded on demand, LRU eviction at --models-max, b10621's refusals,
the /models inventory, autoload off, ?reload=1 after a presets edit, /models/sse, and a failed load.

The layout mirrors captures-router/README.md: ``alpha`` and ``beta`` in --models-dir, ``gamma`` defined only by
the presets file (alias ``g1``), ``--models-max 2``; each model is the tiny synthetic checkpoint.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest

from tests.e2e.admin_harness import admin, mlxd_admin
from tests.e2e.captures import key_set, load
from tests.e2e.conftest import RunningServer

CAPTURES = Path(__file__).parent / "captures-router"
PRESETS = ("[*]\nctx-size = 1024\n\n[gamma]\nmodel = {gamma}\nctx-size = 2048\nalias = g1\nn-predict = 7\n\n"
           "[alpha]\ntemp = 0.5\n")
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def capture(name: str) -> Any:
    return load(name, CAPTURES)


@pytest.fixture
def layout(tmp_path: Path, tiny_checkpoint: Path) -> Path:
    models = tmp_path / "models"
    models.mkdir()
    for name in ("alpha", "beta"):
        shutil.copytree(tiny_checkpoint, models / name)  # a symlink leading out of --models-dir is skipped
    (tmp_path / "gamma").symlink_to(tiny_checkpoint, target_is_directory=True)
    (tmp_path / "store").mkdir()  # an empty model store, so the machine's hub cache stays out of the test
    (tmp_path / "presets.ini").write_text(PRESETS.format(gamma=tmp_path / "gamma"))
    return tmp_path


def router(start_server: Callable[..., RunningServer], root: Path, *extra: str) -> RunningServer:
    return start_server("--models-dir", str(root / "models"), "--models-preset", str(root / "presets.ini"),
                        "--models-max", "2", "--model-store-root", str(root / "store"),
                        "--admin-listen", f"unix:{root / 'admin.sock'}", *extra, model=False)


def states(client: httpx.Client) -> dict[str, str]:
    return {e["id"]: e["status"]["value"] for e in client.get("/models").json()["data"]}


def wait_for(client: httpx.Client, name: str, value: str) -> dict[str, str]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        now = states(client)
        if now[name] == value:
            return now
        time.sleep(0.02)
    raise AssertionError(f"{name} never became {value}: {states(client)}")


def refusal(answer: httpx.Response, status: int, message: str) -> None:
    assert answer.status_code == status, answer.text
    assert answer.json() == {"error": {"code": status, "message": message, "type": "invalid_request_error"}}


def test_load_on_demand_lru_eviction_and_refusals(start_server: Callable[..., RunningServer], layout: Path) -> None:
    running = router(start_server, layout)
    with running.client() as client:
        initial = client.get("/models")
        assert initial.status_code == 200
        assert key_set(initial.json()) == key_set(capture("02_get_models_initial").json())
        assert client.get("/v1/models").json()["data"] == initial.json()["data"]
        by_id = {e["id"]: e for e in initial.json()["data"]}
        assert [by_id[n]["source"] for n in ("alpha", "beta", "gamma")] == ["preset", "models_dir", "preset"]
        assert by_id["gamma"]["aliases"] == ["g1"] and "ctx-size = 2048" in by_id["gamma"]["status"]["preset"]
        assert "temperature = 0.5" in by_id["alpha"]["status"]["preset"]  # [*] and the section merged
        assert "ctx-size = 1024" in by_id["alpha"]["status"]["preset"]
        props = client.get("/props")
        assert key_set(props.json()) == key_set(capture("04_get_props_no_model").json())
        assert props.json()["role"] == "router" and props.json()["max_instances"] == 2
        assert props.json()["build_info"].startswith("b10621-mlxd-")  # upstream test_router.py::test_router_props

        refusal(client.get("/props", params={"model": "alpha", "autoload": "false"}), 400, "model is not loaded")
        assert client.post("/models/load", json={"model": "alpha"}).json() == {"success": True}
        loaded = wait_for(client, "alpha", "loaded")
        assert loaded == {"alpha": "loaded", "beta": "unloaded", "gamma": "unloaded"}
        alpha = next(e for e in client.get("/models").json()["data"] if e["id"] == "alpha")
        reference = next(e for e in capture("09_get_models_while_alpha_loading").json()["data"] if e["id"] == "alpha")
        assert key_set(alpha) == key_set(reference)  # a loaded entry carries meta
        alpha_props = client.get("/props", params={"model": "alpha"}).json()
        assert alpha_props["model_alias"] == "alpha"
        assert alpha_props["default_generation_settings"]["params"]["temperature"] == 0.5
        assert alpha_props["default_generation_settings"]["params"]["n_predict"] == -1

        unknown = client.post("/models/load", json={"model": "unknown"})
        assert (unknown.status_code, unknown.json()) == (404, capture("11_post_models_load_unknown").json())
        refusal(client.post("/models/load", json={"model": "alpha"}), 400, "model is already running")

        # beta loads on demand for a POST that names it; alpha, loaded first, is then the least recently used.
        chat = client.post("/v1/chat/completions", json={**CHAT, "model": "beta"})
        assert chat.status_code == 200, chat.text + running.log()
        assert chat.json()["model"] == "beta"
        assert client.post("/models/load", json={"model": "gamma"}).json() == {"success": True}
        assert wait_for(client, "gamma", "loaded") == {"alpha": "unloaded", "beta": "loaded", "gamma": "loaded"}
        assert "removing LRU name=alpha" in running.log()
        refusal(client.post("/models/unload", json={"model": "alpha"}), 400, "model is not running")
        refusal(client.post("/models/unload", json={"model": "unknown"}), 400, "model is not found")

        # An alias routes to its canonical model, which the response names.
        aliased = client.post("/v1/chat/completions", json={**CHAT, "model": "g1"})
        assert aliased.status_code == 200 and aliased.json()["model"] == "gamma"
        refusal(client.post("/models/load", json={"model": "g1"}), 400, "model is already running")
        # Each model is served with its own options: gamma's preset, not alpha's or the router's.
        gamma_props = client.get("/props", params={"model": "g1"}).json()
        assert gamma_props["model_alias"] == "gamma" and gamma_props["default_generation_settings"]["n_ctx"] == 2048
        assert gamma_props["default_generation_settings"]["params"]["n_predict"] == 7

        refusal(client.post("/completion", params={"autoload": "false"}, json={"model": "alpha", "prompt": "hi"}),
                400, "model is not loaded")
        refusal(client.post("/completion", json={"model": "nosuchmodel", "prompt": "hi"}), 400,
                "model 'nosuchmodel' not found")
        refusal(client.post("/completion", json={"prompt": "hi"}), 400, "model name is missing from the request")
        refusal(client.get("/props", params={"model": "nosuchmodel"}), 400, "model 'nosuchmodel' not found")

        assert client.post("/models/unload", json={"model": "beta"}).json() == {"success": True}
        assert states(client) == {"alpha": "unloaded", "beta": "unloaded", "gamma": "loaded"}


def test_reload_after_ini_edit_sse_autoload_off_and_failed_load(start_server: Callable[..., RunningServer],
                                                                 layout: Path, tiny_checkpoint: Path) -> None:
    broken = layout / "models" / "delta"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    running = router(start_server, layout, "--no-models-autoload")
    with running.client() as client:
        assert client.get("/props").json()["models_autoload"] is False
        # Downloading into the store and removing from it are not served: the generic 404.
        generic = capture("11_post_models_load_unknown").json()
        assert client.post("/models", json={"model": "owner/name"}).json() == generic
        assert client.delete("/models", params={"model": "alpha"}).json() == generic
        refusal(client.post("/v1/chat/completions", json={**CHAT, "model": "gamma"}), 400, "model is not loaded")
        # ?autoload=1 turns autoload on for one request.
        assert client.post("/v1/chat/completions", params={"autoload": "1"},
                           json={**CHAT, "model": "gamma"}).status_code == 200

        events: list[dict[str, Any]] = []
        subscribed = threading.Event()

        def read_events() -> None:
            with httpx.stream("GET", running.base_url + "/models/sse", timeout=30) as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                subscribed.set()  # the headers come at once, before any event (upstream test_router.py reads so)
                for line in stream.iter_lines():
                    if line.startswith("data: "):
                        events.append(json.loads(line[len("data: "):]))
                        if events[-1]["data"].get("status") == "loaded":
                            return

        reader = threading.Thread(target=read_events)
        reader.start()
        assert subscribed.wait(30), "GET /models/sse sent no headers before its first event"
        assert client.post("/models/load", json={"model": "alpha"}).json() == {"success": True}
        reader.join(30)
        assert [(e["model"], e["event"], e["data"]["status"]) for e in events] == [
            ("alpha", "model_status", "loading"), ("alpha", "status_change", "loading"),
            ("alpha", "status_change", "loading"), ("alpha", "status_change", "loaded")]
        assert events[-1]["data"]["info"]["id"] == "alpha" and "meta" in events[-1]["data"]["info"]

        # A model that cannot load fails alone. Room is made before a load, as b10621 does (gamma, the least
        # recently used, is evicted); alpha keeps its state and keeps serving.
        assert client.post("/models/load", json={"model": "delta"}).json() == {"success": True}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            delta = next(e for e in client.get("/models").json()["data"] if e["id"] == "delta")
            if delta["status"].get("failed"):
                break
            time.sleep(0.02)
        assert delta["status"]["value"] == "unloaded" and delta["status"]["failed"] is True
        assert states(client) == {"alpha": "loaded", "beta": "unloaded", "delta": "unloaded", "gamma": "unloaded"}
        assert client.post("/v1/chat/completions", json={**CHAT, "model": "alpha"}).status_code == 200
        assert client.post("/v1/chat/completions", params={"autoload": "true"},
                           json={**CHAT, "model": "g1"}).status_code == 200

        # Editing the presets file and GET /models?reload=1: gamma's definition changed, so it is unloaded; alpha's
        # did not, so it keeps running (rule 2.17). The reload is a committed change of the configuration.
        (layout / "presets.ini").write_text(PRESETS.format(gamma=layout / "gamma").replace("2048", "4096"))
        reloaded = client.get("/models", params={"reload": "1"})
        assert reloaded.status_code == 200
        by_id = {e["id"]: e for e in reloaded.json()["data"]}
        assert by_id["gamma"]["status"]["value"] == "unloaded" and by_id["alpha"]["status"]["value"] == "loaded"
        assert "ctx-size = 4096" in by_id["gamma"]["status"]["preset"] and by_id["gamma"]["aliases"] == ["g1"]
        assert "(reload) unloading model name=gamma" in running.log()

    # The admin API sees the pool's states. Every change of the pool is a committed generation through the one
    # writer: startup (1), gamma's on-demand load (2), alpha's POST /models/load once installed (3), gamma's
    # eviction to make room for delta (4; delta's failed load is refused, not a generation), g1's on-demand load
    # (5) and the reload (6), which also clears the refusal's last_error.
    with admin(layout / "admin.sock") as client:
        status = client.get("/v1/status").json()
        assert status["generation"] == 6 and status["last_error"] is None
        assert {m["name"]: m["state"] for m in status["models"]} == {
            "alpha": "loaded", "beta": "unloaded", "delta": "failed", "gamma": "unloaded"}
    loaded = mlxd_admin(layout / "admin.sock", "load", "beta")
    assert loaded.returncode == 0, loaded.stderr
    with running.client() as client:
        assert states(client)["beta"] == "loaded"  # the admin load waits until the model is loaded
    assert "model is not found" in mlxd_admin(layout / "admin.sock", "unload", "nosuchmodel").stderr

    # A model argument given at run time turns the router into a single-model server; the pool's models go.
    with admin(layout / "admin.sock") as client:
        # null would only drop an admin override; an empty path is b10621's own "not given".
        answer = client.patch("/v1/config", json={"model": str(tiny_checkpoint), "models-dir": "",
                                                  "models-preset": ""})
        assert answer.status_code == 200 and answer.json()["applied"], answer.text
    with running.client() as client:
        single = client.get("/v1/models").json()
        assert "models" in single and single["data"][0]["id"] == str(tiny_checkpoint)
        assert client.post("/completion", json={"prompt": "hi", "n_predict": 2}).status_code == 200
        assert client.post("/models/load", json={"model": "alpha"}).status_code == 404
