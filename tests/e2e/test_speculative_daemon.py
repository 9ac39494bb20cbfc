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


def test_spec_types_mlxd_lacks_are_refused_before_loading(start_server: Callable[..., RunningServer]) -> None:
    with pytest.raises(RuntimeError, match=r"(?s)exited with 2:.*spec-type.*only draft-simple"):
        start_server("--spec-type", "ngram-simple")
