"""A daemon serves with -ngl at or above the layer count, -ngl 0 and -dev none (MLX runs on the CPU here), and
refuses a partial offload before it reads a weight (issue 28, item 11)."""

from __future__ import annotations

import re
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
    # Each step a person waits for is logged: which model, how much to read, where it runs, then the warm-up.
    log = running.log()
    where = "CPU only" if "0" in args or "none" in args else "every layer on the CPU"
    assert re.search(rf"loading model \S+ from \S+: 1 weight file\(s\), [\d.]+ MiB, {where}", log), log
    assert re.search(r"weights read in [\d.]+ s \([\d,]+ parameters\)", log) and "warm-up of" in log, log


def test_a_daemon_refuses_partial_offload_before_reading_weights(tiny_checkpoint: Path) -> None:
    done = subprocess.run([str(BIN / "mlxd-server"), "-m", str(tiny_checkpoint), "-ngl", "1", "--port", "0",
                           "--admin-listen", "off"], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "partial GPU offload (1 of 2 layers)" in done.stderr + done.stdout
    assert "weights read" not in done.stderr + done.stdout
