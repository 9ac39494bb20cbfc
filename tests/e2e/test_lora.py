"""Runtime LoRA through a real ``mlxd-server``: ``--lora``, ``--lora-scaled``, ``--lora-init-without-apply``,
``GET``/``POST /lora-adapters`` and the per-request ``lora`` field, with changes under load."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxd.dev.synth_lora import make_adapter
from tests.e2e.admin_harness import admin, short_dir
from tests.e2e.conftest import RunningServer

Start = Callable[..., RunningServer]
PROMPT = "The quick brown fox"


@pytest.fixture(scope="module")
def adapters(tiny_model: Any, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("lora")
    return [str(make_adapter(tiny_model.model, root / f"a{seed}", seed=seed)) for seed in (1, 2)]


def complete(client: httpx.Client, n: int = 24, prompt: str = PROMPT, **fields: Any) -> str:
    response = client.post("/completion", json={"prompt": prompt, "n_predict": n, "temperature": 0, **fields})
    assert response.status_code == 200, response.text
    return str(response.json()["content"])


def test_scales_change_live_and_never_touch_a_request_in_flight(start_server: Start, adapters: list[str],
                                                                 server: RunningServer) -> None:
    sock = short_dir() / "admin.sock"
    running = start_server("--lora", adapters[0], "--lora-scaled", f"{adapters[1]}:0.25", "--parallel", "2",
                           "--admin-listen", f"unix:{sock}")
    with running.client() as client, server.client() as plain, admin(sock) as control:
        generation = control.get("/v1/status").json()["generation"]
        assert client.get("/lora-adapters").json() == [
            {"id": 0, "path": adapters[0], "scale": 1.0, "task_name": "", "prompt_prefix": ""},
            {"id": 1, "path": adapters[1], "scale": 0.25, "task_name": "", "prompt_prefix": ""},
        ]
        base = complete(plain, 48)
        before = complete(client, 48)
        assert before != base
        # A request streams at the starting scales while POST switches every adapter off.
        with client.stream("POST", "/completion", json={"prompt": PROMPT, "n_predict": 48, "temperature": 0,
                                                         "stream": True}) as stream:
            lines = stream.iter_lines()
            pieces = [json.loads(next(line for line in lines if line.startswith("data: "))[6:])["content"]]
            changed = client.post("/lora-adapters", json=[{"id": 0, "scale": 0}])
            assert changed.status_code == 200 and changed.json() == {"success": True}
            assert [a["scale"] for a in client.get("/lora-adapters").json()] == [0.0, 0.0]  # id 1 not listed: 0
            after = complete(client, 48)
            pieces += [json.loads(line[6:])["content"] for line in lines if line.startswith("data: ")]
        assert "".join(pieces) == before
        assert after == base
        # One committed change through the reconcile path; an identical one is a no-op.
        assert control.get("/v1/status").json()["generation"] == generation + 1
        assert client.post("/lora-adapters", json=[]).json() == {"success": True}
        assert control.get("/v1/status").json()["generation"] == generation + 1
        assert client.post("/lora-adapters", json=[{"id": 1, "scale": 0.25}, {"id": 0, "scale": 1.0}]).json() == {
            "success": True}
        assert complete(client, 48) == before


def test_per_request_lora_and_b10621s_resolution_rule(start_server: Start, adapters: list[str],
                                                      server: RunningServer) -> None:
    running = start_server("--lora", f"{adapters[0]},{adapters[1]}", "--lora-init-without-apply")
    with running.client() as client, server.client() as plain:
        assert [a["scale"] for a in client.get("/lora-adapters").json()] == [0.0, 0.0]
        base = complete(plain)
        assert complete(client) == base  # loaded, not applied
        one = complete(client, lora=[{"id": 0, "scale": 0.5}])
        assert one != base
        assert complete(client) == base  # nothing leaks into the next request
        assert complete(client, lora=[]) == base  # an empty list means the server-wide scales
        assert complete(client, lora=[{"id": 1, "scale": 0.5}, {"id": 0, "scale": 0.5}]) not in (base, one)
        assert complete(client, lora=[{"id": 7, "scale": 1.0}]) == base  # unknown ids are ignored, others 0
        assert complete(client, lora=[{"id": 0, "scale": 0.1}, {"id": 0, "scale": 0.5}]) == one  # the later wins
        for bad in ({"id": 0}, ["x"], [{"id": 0, "scale": "1"}]):  # refused by the schema, as b10621
            refused = client.post("/completion", json={"prompt": PROMPT, "n_predict": 2, "lora": bad})
            assert refused.status_code == 400 and refused.json()["error"]["type"] == "invalid_request_error"

        # POST: a non-array is refused; entries are read leniently, as b10621's json_value reads them.
        refused = client.post("/lora-adapters", json={"id": 0, "scale": 1})
        assert refused.status_code == 400
        assert refused.json()["error"] == {"code": 400, "message": "Request body must be an array",
                                           "type": "invalid_request_error"}
        assert client.post("/lora-adapters", json=[{"id": 0, "scale": 0.5}, {"id": 9, "scale": 2}, "x",
                                                    {"scale": 3}, {"id": "1", "scale": 1}]).json() == {"success": True}
        assert [a["scale"] for a in client.get("/lora-adapters").json()] == [0.5, 0.0]
        assert complete(client) == one


def test_scale_changes_under_eight_streams_lose_nothing(start_server: Start, adapters: list[str]) -> None:
    running = start_server("--lora", adapters[0], "--parallel", "4")
    with running.client() as client:
        states = {1.0: complete(client, 32), 0.0: complete(client, 32, lora=[{"id": 0, "scale": 0.0}])}
        assert states[1.0] != states[0.0]
        outcomes: list[str] = []
        failures: list[str] = []
        stop = threading.Event()

        def stream_forever() -> None:
            with running.client() as own:
                while not stop.is_set():
                    try:
                        with own.stream("POST", "/completion", json={"prompt": PROMPT, "n_predict": 32,
                                                                     "temperature": 0, "stream": True}) as r:
                            if r.status_code != 200:
                                failures.append(f"status {r.status_code}")
                                continue
                            chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
                    except httpx.HTTPError as exc:
                        failures.append(repr(exc))
                        continue
                    final = chunks[-1] if chunks else {}
                    if not final.get("stop") or final.get("tokens_predicted") != 32:
                        failures.append(f"truncated: {final}")
                    outcomes.append("".join(c.get("content", "") for c in chunks))

        threads = [threading.Thread(target=stream_forever) for _ in range(8)]
        for t in threads:
            t.start()
        try:
            for round_, scale in enumerate((0.0, 1.0, 0.0, 1.0)):
                while len(outcomes) < 8 * (round_ + 1) and not failures:
                    threading.Event().wait(0.05)
                answer = client.post("/lora-adapters", json=[{"id": 0, "scale": scale}])
                assert answer.json() == {"success": True}
        finally:
            stop.set()
            for t in threads:
                t.join(120)
        assert not failures, failures[:3]
        # Every stream is one state's output from end to end: no generation saw a change mid-way.
        assert set(outcomes) <= set(states.values()) and len(set(outcomes)) == 2


def test_an_adapter_that_cannot_be_served_stops_startup(start_server: Start, tmp_path: Path,
                                                       tiny_model: Any) -> None:
    poisoned = make_adapter(tiny_model.model, tmp_path / "nan", poison=float("nan"))
    for args, message in ((["--lora", str(tmp_path / "missing")], "no such directory"),
                          (["--lora", str(poisoned)], "lora_b holds NaN or infinite values"),
                          (["--lora", str(tmp_path / "a.gguf")], "GGUF adapters are llama.cpp's format"),
                          (["--lora-scaled", f"{tmp_path}:x"], "expected FNAME:SCALE")):
        with pytest.raises(RuntimeError, match=message):
            start_server(*args, "--admin-listen", f"unix:{short_dir() / 'admin.sock'}")
