"""A daemon serves with -ngl at or above the layer count, -ngl 0 and -dev none (MLX runs on the CPU here), and
refuses a partial offload before it reads a weight (issue 28, item 11)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import BIN


@pytest.mark.parametrize("args", [["-ngl", "33"], ["-ngl", "0"], ["-dev", "none"], ["-ngl", "0", "-dev", "none"]],
                         ids=["ngl33", "ngl0", "dev-none", "both"])
def test_a_daemon_serves_with_full_offload_or_cpu_only(start_server, args: list[str]) -> None:
    running = start_server(*args, "--admin-listen", "off")
    with running.client() as client:
        answer = client.post("/completion", json={"prompt": "x", "n_predict": 2})
        assert answer.status_code == 200 and answer.json()["tokens_predicted"] == 2


def test_a_daemon_refuses_partial_offload_before_reading_weights(tiny_checkpoint: Path) -> None:
    done = subprocess.run([str(BIN / "mlxd-server"), "-m", str(tiny_checkpoint), "-ngl", "1", "--port", "0",
                           "--admin-listen", "off"], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "partial GPU offload (1 of 2 layers)" in done.stderr + done.stdout
    assert "weights read" not in done.stderr + done.stdout
