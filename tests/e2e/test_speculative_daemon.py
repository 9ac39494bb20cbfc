"""A draft model through a real ``mlxd-server``: -md serves, and /props, /slots, /metrics and each response's
timings report drafted and accepted tokens."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import synthetic_checkpoint
from tests.e2e.conftest import RunningServer


def test_a_draft_model_serves_and_reports_drafted_and_accepted_tokens(
    start_server: Callable[..., RunningServer], tiny_checkpoint: Path
) -> None:
    target = synthetic_checkpoint("tiny", passthrough=6)
    running = start_server("-m", str(target), "-md", str(tiny_checkpoint), "--spec-draft-n-max", "4", "--metrics",
                           "-c", "2048", "-np", "2")
    with running.client() as client:
        body = client.post("/completion", json={"prompt": "def fibonacci(n):\n", "n_predict": 24,
                                                "temperature": 0}).json()
        assert body["tokens_predicted"] == 24
        assert body["timings"]["draft_n"] >= body["timings"]["draft_n_accepted"] > 0
        props = client.get("/props").json()
        assert props["default_generation_settings"]["params"]["speculative.types"] == "draft-simple"
        assert props["speculative"]["n_max"] == 4
        assert props["speculative"]["n_accepted"] == body["timings"]["draft_n_accepted"]
        assert all(slot["speculative"] for slot in client.get("/slots").json())
        metrics = client.get("/metrics").text
        assert f"llamacpp:spec_decode_num_accepted_tokens_total {body['timings']['draft_n_accepted']}\n" in metrics


def test_ngram_simple_serves_without_a_draft_model(start_server: Callable[..., RunningServer],
                                                   tiny_checkpoint: Path) -> None:
    """``--spec-type ngram-simple``: proposals from the request's own history, verified by the model itself. A
    logit bias makes the greedy text one token repeated, whose history the one-token lookup always matches."""
    running = start_server("-m", str(tiny_checkpoint), "-c", "2048", "--spec-type", "ngram-simple",
                           "--spec-ngram-simple-size-n", "1", "--spec-ngram-simple-size-m", "8", "--metrics")
    with running.client() as client:
        body = client.post("/completion", json={"prompt": "one two three four " * 4, "n_predict": 32,
                                                "temperature": 0, "logit_bias": [[300, 100.0]],
                                                "return_tokens": True}).json()
        assert body["tokens"] == [300] * 32
        assert body["generation_settings"]["speculative.types"] == "ngram-simple"
        assert body["timings"]["draft_n"] >= body["timings"]["draft_n_accepted"] > 0
        props = client.get("/props").json()
        assert props["default_generation_settings"]["params"]["speculative.types"] == "ngram-simple"
        assert props["speculative"]["ngram_size_n"] == 1 and "draft_model" not in props["speculative"]
        assert all(slot["speculative"] for slot in client.get("/slots").json())
        metrics = client.get("/metrics").text
        assert f"llamacpp:spec_decode_num_accepted_tokens_total {body['timings']['draft_n_accepted']}\n" in metrics


def test_ngram_mod_serves_from_a_table_every_request_feeds(start_server: Callable[..., RunningServer],
                                                          tiny_checkpoint: Path) -> None:
    """``--spec-type ngram-mod``: a request's tokens join the shared table in chunks of 32, so a second request
    with the same text is proposed chains from its first step; greedy tokens are those a plain step would pick."""
    prompt = {"prompt": "one two three four " * 4, "n_predict": 48, "temperature": 0, "logit_bias": [[300, 100.0]],
              "return_tokens": True}
    running = start_server("-m", str(tiny_checkpoint), "-c", "2048", "--spec-type", "ngram-mod",
                           "--spec-ngram-mod-n-match", "2", "--spec-ngram-mod-n-min", "1",
                           "--spec-ngram-mod-n-max", "8")
    with running.client() as client:
        bodies = [client.post("/completion", json=prompt).json() for _ in range(2)]
        props = client.get("/props").json()
    assert all(b["tokens"] == [300] * 48 for b in bodies)
    assert bodies[1]["generation_settings"]["speculative.types"] == "ngram-mod"
    assert bodies[1]["timings"]["draft_n"] >= bodies[1]["timings"]["draft_n_accepted"] > 0
    assert (props["speculative"]["ngram_mod_n_match"], props["speculative"]["ngram_mod_n_max"]) == (2, 8)


def test_ngram_map_k4v_serves_from_each_slots_map(start_server: Callable[..., RunningServer],
                                                  tiny_checkpoint: Path) -> None:
    """``--spec-type ngram-map-k4v``: a repetitive prompt's repeats are proposed from the slot's map, and /props
    reports its sizes; greedy tokens are those a plain step would pick."""
    prompt = {"prompt": "one two three four " * 8, "n_predict": 48, "temperature": 0, "logit_bias": [[300, 100.0]],
              "return_tokens": True}
    running = start_server("-m", str(tiny_checkpoint), "-c", "2048", "--spec-type", "ngram-map-k4v",
                           "--spec-ngram-map-k4v-size-n", "2", "--spec-ngram-map-k4v-size-m", "8")
    with running.client() as client:
        body = client.post("/completion", json=prompt).json()
        props = client.get("/props").json()
    assert body["tokens"] == [300] * 48
    assert body["generation_settings"]["speculative.types"] == "ngram-map-k4v"
    assert body["timings"]["draft_n"] >= body["timings"]["draft_n_accepted"] > 0
    assert (props["speculative"]["ngram_map_k4v_size_n"], props["speculative"]["ngram_map_k4v_size_m"]) == (2, 8)


def test_spec_types_mlxd_lacks_are_refused_before_loading(start_server: Callable[..., RunningServer]) -> None:
    with pytest.raises(RuntimeError, match=r"(?s)exited with 2:.*spec-type.*only draft-simple .*eagle3, mtp"):
        start_server("--spec-type", "draft-mtp")


def test_ngram_cache_serves_from_a_lookup_cache_file(start_server: Callable[..., RunningServer],
                                                     tiny_checkpoint: Path, tmp_path: Path) -> None:
    """``--spec-type ngram-cache -lcs FILE``: a static cache in llama.cpp's format proposes what it counted; a
    file that cannot be read stops the start, naming it."""
    from mlxd.engine.speculative import ngram_cache

    static: ngram_cache.Cache = {}
    ngram_cache.update(static, [300] * 16, 16)  # the text the logit bias below makes the model write
    ngram_cache.save(static, tmp_path / "static.bin")
    running = start_server("-m", str(tiny_checkpoint), "-c", "2048", "--spec-type", "ngram-cache",
                           "-lcs", str(tmp_path / "static.bin"))
    with running.client() as client:
        body = client.post("/completion", json={"prompt": "one two three", "n_predict": 32, "temperature": 0,
                                                "logit_bias": [[300, 100.0]], "return_tokens": True}).json()
    assert body["tokens"] == [300] * 32
    assert body["generation_settings"]["speculative.types"] == "ngram-cache"
    assert body["timings"]["draft_n"] >= body["timings"]["draft_n_accepted"] > 16
    with pytest.raises(RuntimeError, match=r"(?s)exited with 1:.*cannot read the lookup cache .*missing\.bin"):
        start_server("-m", str(tiny_checkpoint), "--spec-type", "ngram-cache", "-lcs", str(tmp_path / "missing.bin"))
