"""--cache-disk on the real daemon: a prompt cached before SIGTERM is served from disk after a restart with the same
output as a cold run; another model, -ctk or LoRA scale never takes the entry; kill -9 while entries are written never
leads to a wrong answer; a damaged file keeps serving."""

from __future__ import annotations

import json
import random
import re
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxd.dev.synth_lora import make_adapter
from tests.conftest import synthetic_checkpoint
from tests.e2e.admin_harness import mlxd_admin, short_dir, wait_for
from tests.e2e.conftest import RunningServer

TEXTS = ["def fibonacci(n):\n", "The quick brown fox ", "import os\nimport sys\n\n", "Hello, how are you today? ",
         "Once upon a time ", "SELECT * FROM t WHERE ", "To be or not to be ", "fn main() { println!(); } "]


def prompt(i: int, times: int = 30) -> str:
    return TEXTS[i % len(TEXTS)] * times + f" #{i}"


def complete(running: RunningServer, text: str, cache_prompt: bool = True, **extra: Any) -> tuple[str, int, int]:
    """(content, timings.cache_n, timings.prompt_n) of a greedy /completion."""
    body = {"prompt": text, "n_predict": 12, "temperature": 0, "cache_prompt": cache_prompt, **extra}
    with running.client() as client:
        r = client.post("/completion", json=body)
    assert r.status_code == 200, r.text
    data = r.json()
    return data["content"], data["timings"]["cache_n"], data["timings"]["prompt_n"]


def metric(running: RunningServer, name: str) -> float:
    with running.client() as client:
        text = client.get("/metrics").text
    [line] = [line for line in text.splitlines() if line.startswith(name + " ")]
    return float(line.split(" ", 1)[1])


def entries(d: Path) -> list[Path]:
    return sorted(d.glob("*.kv"))


def test_restart_serves_the_cached_prefix_from_disk(start_server: Callable[..., RunningServer], tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    sock = short_dir() / "admin.sock"
    first = start_server("--cache-disk", str(cache), "--admin-listen", f"unix:{sock}")
    cold, cache_n, n_prompt = complete(first, prompt(0))
    assert cache_n == 0
    assert first.stop(signal.SIGTERM) == 0
    assert "written to the disk tier" in first.log()
    assert len(entries(cache)) == 1

    second = start_server("--cache-disk", str(cache), "--admin-listen", f"unix:{sock}", "--metrics")
    content, cache_n, prompt_n = complete(second, prompt(0))
    assert content == cold and cache_n == n_prompt - 1 and prompt_n == 1
    assert complete(second, prompt(0), cache_prompt=False)[0] == cold  # and a cold run on the restarted daemon
    assert metric(second, "mlxd_cache_disk_hits_total") == 1
    assert metric(second, "mlxd_cache_disk_entries") == 1
    assert metric(second, "mlxd_cache_disk_read_bytes_total") == entries(cache)[0].stat().st_size
    status = mlxd_admin(sock, "status")
    assert status.returncode == 0, status.stderr
    assert "prompt cache on disk" in status.stdout and "hits / misses" in status.stdout
    data = json.loads(mlxd_admin(sock, "status", "--json").stdout)
    assert data["cache_disk"]["hits"] == 1 and data["cache_disk"]["entries"] == 1
    assert data["cache_disk"]["dirs"] == {str(cache): "rw"}


def test_a_restarted_daemon_s_slot_holds_its_last_prompt_again(start_server: Callable[..., RunningServer],
                                                                tmp_path: Path) -> None:
    """The drain writes the slot's cache first; the restarted worker puts the most recent entry back in the slot
    before it serves, and an older one is read from disk when asked for."""
    cache = tmp_path / "cache"
    first = start_server("--cache-disk", str(cache), "--parallel", "1")
    older, _, n_older = complete(first, prompt(2))
    last, _, n_last = complete(first, prompt(3))  # the slot's; the older prompt moves to the RAM prompt cache
    assert first.stop(signal.SIGTERM) == 0
    assert len(entries(cache)) == 2

    second = start_server("--cache-disk", str(cache), "--parallel", "1", "--metrics")
    restored = re.search(r"1 slot\(s\) restored from the disk tier in [\d.]+ s \((\d+) tokens\)", second.log())
    assert restored and n_last < int(restored[1]) <= n_last + 12, second.log()  # the prompt and its generation
    assert metric(second, "mlxd_cache_disk_hits_total") == 1  # the restore's read
    assert complete(second, prompt(3)) == (last, n_last - 1, 1)
    assert metric(second, "mlxd_cache_disk_hits_total") == 1  # taken from the slot, not read again
    assert complete(second, prompt(2)) == (older, n_older - 1, 1)  # read at request time
    assert metric(second, "mlxd_cache_disk_hits_total") == 2


def test_another_model_ctk_or_lora_scale_never_reuses_an_entry(start_server: Callable[..., RunningServer],
                                                             tiny_model: Any, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    writer = start_server("--cache-disk", str(cache))
    complete(writer, prompt(1))
    assert writer.stop(signal.SIGTERM) == 0 and len(entries(cache)) == 1

    other = synthetic_checkpoint("tiny", seed=1)
    adapter = make_adapter(tiny_model.model, tmp_path / "adapter", seed=1)
    for args in (["-m", str(other)], ["-ctk", "f16", "-ctv", "f16"], ["--lora-scaled", f"{adapter}:0.5"]):
        running = start_server("--cache-disk", str(cache), *args)
        content, cache_n, _ = complete(running, prompt(1))  # first: nothing in RAM, the disk entry is not theirs
        assert cache_n == 0, args
        assert content == complete(running, prompt(1), cache_prompt=False)[0], args
        assert running.stop(signal.SIGTERM) == 0

    # The adapter at 0.5 wrote its own entry at the stop above: the same scale takes it, another does not.
    again = start_server("--cache-disk", str(cache), "--lora-scaled", f"{adapter}:0.5")
    assert complete(again, prompt(1))[1] > 0
    assert again.stop(signal.SIGTERM) == 0
    scaled = start_server("--cache-disk", str(cache), "--lora-scaled", f"{adapter}:4.0")
    content, cache_n, _ = complete(scaled, prompt(1))
    assert cache_n == 0 and content == complete(scaled, prompt(1), cache_prompt=False)[0]


def test_a_corrupt_entry_is_skipped_and_logged(start_server: Callable[..., RunningServer], tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = start_server("--cache-disk", str(cache))
    cold = complete(first, prompt(2))[0]
    assert first.stop(signal.SIGTERM) == 0
    [path] = entries(cache)
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x55
    path.write_bytes(bytes(data))
    second = start_server("--cache-disk", str(cache), "--metrics")
    assert complete(second, prompt(2))[:2] == (cold, 0)
    assert "checksum mismatch" in second.log()
    assert metric(second, "mlxd_cache_disk_corrupt_total") == 1


def _kill_rounds(start_server: Callable[..., RunningServer], cache: Path, rounds: int) -> None:
    """Rounds of: a daemon whose slot caches go straight to disk (--cache-ram 0, one slot, so each request writes
    its predecessor's), SIGKILL at a random moment after its first answer; then a daemon must answer every prompt
    that was sent as a cold run does."""
    args = ("--cache-disk", str(cache), "--cache-ram", "0", "--parallel", "1", "--no-warmup")
    rng = random.Random(29)
    sent: list[int] = []
    for round_ in range(rounds):
        running = start_server(*args)
        for k in range(40):  # bounded: the kill comes long before
            i = round_ * 40 + k
            try:
                complete(running, prompt(i, 20))
            except (httpx.TransportError, AssertionError):
                break
            sent.append(i)
            if k == 0:
                threading.Timer(rng.uniform(0.0, 0.4), running.process.kill).start()
        running.process.wait(30)
        assert running.process.returncode == -signal.SIGKILL
    assert entries(cache), "no entry was ever written"
    final = start_server(*args)
    assert not list(cache.glob("*.tmp"))
    hits = 0
    for i in sent[-12:] + sent[:4]:
        content, cache_n, _ = complete(final, prompt(i, 20))
        assert content == complete(final, prompt(i, 20), cache_prompt=False)[0], i
        hits += cache_n > 0
    assert hits > 0
    assert final.stop(signal.SIGTERM) == 0


def test_kill_9_while_writing_never_serves_a_bad_entry(start_server: Callable[..., RunningServer],
                                                      tmp_path: Path) -> None:
    _kill_rounds(start_server, tmp_path / "cache", 3)


@pytest.mark.soak
def test_kill_9_while_writing_20_rounds(start_server: Callable[..., RunningServer], tmp_path: Path) -> None:
    _kill_rounds(start_server, tmp_path / "cache", 20)


def test_a_sighup_reload_keeps_the_prompt_cache_warm(start_server: Callable[..., RunningServer],
                                                     tiny_checkpoint: Path, tmp_path: Path) -> None:
    """A reload (here: -c changed in the file, then SIGHUP) replaces the worker: the old one writes its cache as it
    drains, and the new one, same model and KV settings, reads it."""
    cache, toml = tmp_path / "cache", tmp_path / "mlxd.toml"
    toml.write_text(f'model = "{tiny_checkpoint}"\ncache-disk = "{cache}"\nctx-size = 4096\n')
    running = start_server("--config", str(toml), "--no-watch-config", model=False)
    cold, _, n_prompt = complete(running, prompt(5))
    toml.write_text(toml.read_text().replace("ctx-size = 4096", "ctx-size = 2048"))
    running.send_signal(signal.SIGHUP)
    wait_for(lambda: "unloaded" in running.log(), 60.0, "the old model to be unloaded")
    assert "written to the disk tier" in running.log()
    with running.client() as client:
        assert client.get("/props").json()["default_generation_settings"]["n_ctx"] == 2048
    content, cache_n, _ = complete(running, prompt(5))
    assert (content, cache_n) == (cold, n_prompt - 1)


def test_waking_from_idle_sleep_is_warm(start_server: Callable[..., RunningServer], tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    running = start_server("--cache-disk", str(cache), "--sleep-idle-seconds", "1")
    cold, _, n_prompt = complete(running, prompt(6))
    wait_for(lambda: "written to the disk tier" in running.log(), 60.0, "the model to sleep")
    content, cache_n, _ = complete(running, prompt(6))  # wakes it: a new worker, the entry from disk
    assert "loaded again" in running.log()
    assert (content, cache_n) == (cold, n_prompt - 1)
