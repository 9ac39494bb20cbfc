"""The admin API's live reads for the operator console: ``GET /v1/slots`` and ``GET /v1/metrics/summary``."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import httpx

from tests.e2e.admin_harness import admin, short_dir, wait_for
from tests.e2e.conftest import RunningServer


def _complete(server: RunningServer, n_predict: int, model: str | None = None) -> dict[str, object]:
    body: dict[str, object] = {"prompt": "hello", "n_predict": n_predict, "temperature": 0}
    if model is not None:
        body["model"] = model
    with server.client() as client:
        answer = client.post("/completion", json=body)
    assert answer.status_code == 200, answer.text
    data: dict[str, object] = answer.json()
    return data


def test_slots_and_metrics_summary_match_the_public_routes(start_server: Callable[..., RunningServer],
                                                           tiny_checkpoint: Path) -> None:
    home = short_dir()
    try:
        sock = home / "admin.sock"
        server = start_server("--parallel", "2", "--ctx-size", "512", "--metrics", "--admin-listen", f"unix:{sock}")
        with admin(sock) as client:
            before = client.get("/v1/metrics/summary")
            assert before.status_code == 200, before.text
            start = before.json()
            assert start["requests_processing"] == 0 and start["requests_deferred"] == 0

            done = _complete(server, 8)
            predicted = int(done["tokens_predicted"])  # type: ignore[call-overload]
            assert predicted > 0

            slots = client.get("/v1/slots")
            assert slots.status_code == 200, slots.text
            models = slots.json()["models"]
            assert list(models) == [str(tiny_checkpoint)]
            with server.client() as public:
                expected = public.get("/slots").json()
            assert [s["id"] for s in models[str(tiny_checkpoint)]] == [s["id"] for s in expected] == [0, 1]
            assert [s["n_ctx"] for s in models[str(tiny_checkpoint)]] == [s["n_ctx"] for s in expected]
            assert any(s.get("id_task") is not None for s in models[str(tiny_checkpoint)])
            assert all("prompt" not in s for s in models[str(tiny_checkpoint)])

            after = client.get("/v1/metrics/summary").json()
            assert after["tokens_predicted_total"] - start["tokens_predicted_total"] == predicted
            assert after["requests_total"] == start["requests_total"] + 1
            assert after["time"] >= start["time"]
            with server.client() as public:
                text = public.get("/metrics").text
            assert f"llamacpp:tokens_predicted_total {after['tokens_predicted_total']}" in text
            # The admin reads took no scrape: the public throughput window still holds the completion.
            rate = float(text.split("\nllamacpp:predicted_tokens_seconds ")[1].split()[0])
            assert rate > 0

            # A read route: a write method is refused in the admin envelope.
            refused = client.post("/v1/slots")
            assert refused.status_code in (404, 405) and "error" in refused.json()
        # The console polls these reads every second: their lines go to debug, a refusal stays at info.
        log = server.log()
        assert "GET /v1/slots" not in log and "GET /v1/metrics/summary" not in log
        assert "POST /v1/slots -> 40" in log
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_router_mode_lists_each_loaded_models_slots(start_server: Callable[..., RunningServer], tmp_path: Path,
                                                    tiny_checkpoint: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    for name in ("alpha", "beta"):
        shutil.copytree(tiny_checkpoint, models / name)
    (tmp_path / "store").mkdir()  # an empty model store, so the machine's hub cache stays out of the test
    home = short_dir()
    try:
        sock = home / "admin.sock"
        server = start_server("--models-dir", str(models), "--model-store-root", str(tmp_path / "store"),
                              "--no-models-autoload", "--admin-listen", f"unix:{sock}", model=False)
        with admin(sock) as client:
            assert client.get("/v1/slots").json() == {"models": {}}
            for name in ("alpha", "beta"):
                loaded = client.post("/v1/models", json={"action": "load", "name": name})
                assert loaded.status_code == 200, loaded.text

            def both() -> dict[str, object] | None:
                shown: dict[str, object] = client.get("/v1/slots").json()["models"]
                return shown if set(shown) == {"alpha", "beta"} else None

            shown = wait_for(both, 60, "both models' slots")
            assert all(isinstance(v, list) and v and v[0]["id"] == 0 for v in shown.values())
            _complete(server, 4, model="alpha")
            summary = client.get("/v1/metrics/summary").json()
            assert summary["tokens_predicted_total"] > 0 and summary["requests_total"] == 1
    finally:
        shutil.rmtree(home, ignore_errors=True)
