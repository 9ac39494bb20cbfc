"""The router queues a request whose model cannot load yet (issue 28, finding 1): at --models-max, a request's
on-demand load evicts only an idle model; while none is idle it waits up to --models-wait-timeout, then gets 503
with Retry-After (b10621 answers 500 at once; the manifest's models-max entry records the difference).

Each model is a copy of the tiny synthetic checkpoint in --models-dir.
"""

from __future__ import annotations

import json
import random
import shutil
import threading
import time
from pathlib import Path
from typing import Callable

import httpx
import pytest

from tests.e2e.conftest import RunningServer

NAMES = ("alpha", "beta", "gamma", "delta")
# A stream long enough to hold its model busy while another request arrives (the tiny model never stops early).
LONG = {"prompt": "hello", "n_predict": 400, "stream": True, "ignore_eos": True}


@pytest.fixture
def models_dir(tmp_path: Path, tiny_checkpoint: Path) -> Path:
    models = tmp_path / "models"
    models.mkdir()
    for name in NAMES:
        shutil.copytree(tiny_checkpoint, models / name)
    (tmp_path / "store").mkdir()  # an empty model store: the machine's hub cache stays out of the test
    return models


def router(start_server: Callable[..., RunningServer], models: Path, *extra: str) -> RunningServer:
    return start_server("--models-dir", str(models), "--model-store-root", str(models.parent / "store"),
                        "--admin-listen", "off", *extra, model=False)


def stream_to_end(client: httpx.Client, model: str, started: threading.Event, out: list[str]) -> None:
    """Read one long stream to its last event; ``out`` gets its stop reason (or what cut it)."""
    with client.stream("POST", "/completion", json={**LONG, "model": model}, timeout=120) as answer:
        started.set()
        last = ""
        for line in answer.iter_lines():
            if line.startswith("data: "):
                last = line[len("data: "):]
        out.append(str(json.loads(last).get("stop_type")) if last else f"cut ({answer.status_code})")


def test_a_request_waits_for_room_then_503_with_retry_after(start_server: Callable[..., RunningServer],
                                                             models_dir: Path) -> None:
    # models-max 1 and a 0 s wait: while alpha streams, beta cannot load and is refused at once, with Retry-After.
    running = router(start_server, models_dir, "--models-max", "1", "--models-wait-timeout", "0")
    with running.client() as client:
        started, ended = threading.Event(), []  # type: ignore[var-annotated]
        reader = threading.Thread(target=stream_to_end, args=(client, "alpha", started, ended))
        reader.start()
        assert started.wait(60), running.log()
        refused = client.post("/completion", json={"prompt": "hi", "n_predict": 2, "model": "beta"})
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"] == {"code": 503, "message": "model limit reached, try again later",
                                           "type": "unavailable_error"}
        reader.join(120)
        assert ended == ["limit"]  # the busy model was not evicted under its stream

    # With room to wait, the same request waits for the stream to end, then loads beta in alpha's place.
    running = router(start_server, models_dir, "--models-max", "1", "--models-wait-timeout", "60")
    with running.client() as client:
        started, ended = threading.Event(), []
        reader = threading.Thread(target=stream_to_end, args=(client, "alpha", started, ended))
        reader.start()
        assert started.wait(60), running.log()
        waited = client.post("/completion", json={"prompt": "hi", "n_predict": 2, "model": "beta"}, timeout=120)
        reader.join(120)
        assert waited.status_code == 200, waited.text + running.log()
        assert ended == ["limit"]
        assert "model name=beta waits for room under --models-max 1" in running.log()
        states = {e["id"]: e["status"]["value"] for e in client.get("/models").json()["data"]}
        assert states["beta"] == "loaded" and states["alpha"] == "unloaded"


def churn(client: httpx.Client, seconds: float, clients: int, seed: int) -> dict[str, list[httpx.Response]]:
    """``clients`` threads name models at random for ``seconds``; every answer, by model."""
    answers: dict[str, list[httpx.Response]] = {name: [] for name in NAMES}
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def one(index: int) -> None:
        pick = random.Random(seed + index)
        while time.monotonic() < stop:
            name = pick.choice(NAMES)
            body = {"prompt": "hello", "n_predict": pick.randint(1, 8), "model": name}
            answer = client.post("/completion", json=body, timeout=120)
            with lock:
                answers[name].append(answer)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 150)
    return answers


def check_churn(answers: dict[str, list[httpx.Response]], log: str) -> int:
    """No 500, every refusal a 503 with Retry-After, every model served; the number of answers."""
    total = 0
    for name, got in answers.items():
        statuses = sorted({a.status_code for a in got})
        assert set(statuses) <= {200, 503}, (name, statuses, [a.text for a in got if a.status_code != 200][:3], log)
        assert all(a.headers.get("retry-after") == "1" for a in got if a.status_code == 503)
        assert any(a.status_code == 200 and a.json()["model"] == name for a in got), (name, statuses)
        total += len(got)
    return total


def test_router_churn_has_no_500(start_server: Callable[..., RunningServer], models_dir: Path) -> None:
    running = router(start_server, models_dir, "--models-max", "2")
    with running.client(limits=httpx.Limits(max_connections=8)) as client:
        answers = churn(client, seconds=12, clients=6, seed=28)
    assert check_churn(answers, running.log()) > 0
    assert "removing LRU name=" in running.log()  # models were evicted to make room, not refused
    tasks = Path(f"/proc/{running.process.pid}/task")
    if tasks.is_dir():  # MLX work runs on parked threads: loads leave no thread behind (engine.threads)
        assert len(list(tasks.iterdir())) < 64, running.log().count(" loaded in ")
