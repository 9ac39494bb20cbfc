"""The options read only when a model loads, and the two the daemon now reads from the running configuration: a
PATCH of each changes what the daemon does, observed where a client or operator sees it (/props, the drain's log,
whether a file edit still reloads). None is a silent commit (design principle 3a, tests/unit/config/test_effects.py).
"""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import synthetic_checkpoint
from tests.e2e.admin_harness import admin, short_dir, wait_for
from tests.e2e.conftest import RunningServer, launch

# option, value, the key of /props' "speculative" object that shows it
SPECULATIVE: list[tuple[str, Any, str]] = [
    ("spec-draft-n-max", 5, "n_max"),
    ("spec-draft-n-min", 1, "n_min"),
    ("draft-p-min", 0.5, "p_min"),
    ("spec-ngram-simple-size-n", 3, "ngram_size_n"),
    ("spec-ngram-simple-size-m", 9, "ngram_size_m"),
    ("spec-ngram-map-k-size-n", 5, "ngram_map_k_size_n"),
    ("spec-ngram-map-k-size-m", 20, "ngram_map_k_size_m"),
    ("spec-ngram-map-k-min-hits", 2, "ngram_map_k_min_hits"),
    ("spec-ngram-map-k4v-size-n", 6, "ngram_map_k4v_size_n"),
    ("spec-ngram-map-k4v-size-m", 21, "ngram_map_k4v_size_m"),
    ("spec-ngram-map-k4v-min-hits", 3, "ngram_map_k4v_min_hits"),
    ("spec-ngram-mod-n-match", 10, "ngram_mod_n_match"),
    ("spec-ngram-mod-n-min", 12, "ngram_mod_n_min"),
    ("spec-ngram-mod-n-max", 60, "ngram_mod_n_max"),
]
TYPES = "draft-simple,ngram-simple,ngram-map-k,ngram-map-k4v,ngram-mod,ngram-cache"


def hub_snapshot(root: Path, repo: str, checkpoint: Path) -> Path:
    """``checkpoint`` as the hub cache under ``root`` holds ``repo`` (offline: nothing is downloaded)."""
    folder = root / ("models--" + repo.replace("/", "--"))
    snapshot = folder / "snapshots" / ("0" * 40)
    shutil.copytree(checkpoint, snapshot)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("0" * 40)
    return snapshot


def test_each_speculative_option_reloads_the_model_with_its_new_value(tiny_checkpoint: Path) -> None:
    home = short_dir()
    sock, hub = home / "admin.sock", home / "hub"
    caches = [home / "static.bin", home / "dynamic.bin", home / "other.bin"]
    for cache in caches:
        cache.write_bytes(b"")  # a lookup cache with no n-grams yet
    snapshot = hub_snapshot(hub, "acme/draft", tiny_checkpoint)
    other_draft = home / "draft"
    shutil.copytree(tiny_checkpoint, other_draft)
    running = launch(["-m", str(tiny_checkpoint), "-md", str(tiny_checkpoint), "--spec-type", TYPES,
                      "--lookup-cache-static", str(caches[0]), "--lookup-cache-dynamic", str(caches[1]),
                      "--model-store-root", str(hub), "-c", "1024", "--host", "127.0.0.1", "--port", "0",
                      "--admin-listen", f"unix:{sock}"], home / "mlxd.log", env={"HF_HUB_OFFLINE": "1"})
    try:
        with admin(sock) as control, running.client() as public:
            def patch(option: str, value: Any) -> dict[str, Any]:
                generation = control.get("/v1/status").json()["generation"]
                answer = control.patch("/v1/config", json={option: value})
                assert answer.status_code == 200, answer.text
                result = answer.json()
                assert result["applied"] and result["changed"] == [option] and not result["pending_restart"]
                assert result["generation"] > generation
                speculative: dict[str, Any] = public.get("/props").json()["speculative"]
                return speculative

            for option, value, key in SPECULATIVE:
                assert patch(option, value)[key] == value, option
            for option, cache in (("lookup-cache-static", caches[2]), ("lookup-cache-dynamic", caches[2])):
                assert patch(option, str(cache))[option.replace("-", "_")] == str(cache)
            assert patch("model-draft", str(other_draft))["draft_model"] == str(other_draft)
            assert patch("hf-repo-draft", "acme/draft")["draft_model"] == str(snapshot)  # the repo wins over -md
            assert patch("spec-type", ["draft-simple", "ngram-simple"])["type"] == "draft-simple,ngram-simple"
            body = public.post("/completion", json={"prompt": "def fibonacci(n):\n", "n_predict": 16,
                                                    "temperature": 0}).json()
            assert body["tokens_predicted"] == 16 and body["timings"]["draft_n"] > 0
    finally:
        assert running.stop() == 0
        shutil.rmtree(home, ignore_errors=True)


def test_mmproj_auto_reloads_the_model_with_or_without_its_media_tower(
        start_server: Callable[..., RunningServer]) -> None:
    pytest.importorskip("mlx_vlm")
    sock = short_dir() / "admin.sock"
    running = start_server("-m", str(synthetic_checkpoint("qwen2-vl-tiny")), "--admin-listen", f"unix:{sock}")
    with admin(sock) as control, running.client() as public:
        assert public.get("/props").json()["modalities"]["vision"] is True
        assert control.patch("/v1/config", json={"mmproj-auto": False}).json()["applied"]
        assert public.get("/props").json()["modalities"]["vision"] is False
        assert control.patch("/v1/config", json={"mmproj-auto": True}).json()["applied"]
        assert public.get("/props").json()["modalities"]["vision"] is True


def test_watch_config_and_shutdown_timeout_are_read_from_the_running_configuration(tiny_checkpoint: Path) -> None:
    home = short_dir()
    sock, toml = home / "admin.sock", home / "mlxd.toml"
    toml.write_text(f'temperature = 0.5\nmodel = "{tiny_checkpoint}"\n')
    running = launch(["--config", str(toml), "--host", "127.0.0.1", "--port", "0", "--admin-listen", f"unix:{sock}"],
                     home / "mlxd.log")
    try:
        with admin(sock) as control:
            def generation() -> int:
                value: int = control.get("/v1/status").json()["generation"]
                return value

            assert control.patch("/v1/config", json={"watch-config": False}).json()["applied"]
            before = generation()
            toml.write_text(f'temperature = 0.25\nmodel = "{tiny_checkpoint}"\n')
            wait_for(lambda: "not reloading (watch-config is off)" in running.log(), 30, "the edit to be seen")
            time.sleep(0.5)
            assert generation() == before
            assert control.patch("/v1/config", json={"watch-config": True}).json()["applied"]
            toml.write_text(f'temperature = 0.3\nmodel = "{tiny_checkpoint}"\n')
            wait_for(lambda: generation() == before + 2, 30, "the edit to be applied")
            assert control.get("/v1/config").json()["options"]["temperature"]["value"] == 0.3
            assert control.patch("/v1/config", json={"shutdown-timeout": 7}).json()["applied"]
        running.send_signal(signal.SIGTERM)
        assert running.process.wait(60) == 0
        assert "waiting up to 7 s" in running.log()
    finally:
        running.stop()
        shutil.rmtree(home, ignore_errors=True)
