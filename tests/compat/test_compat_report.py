"""`mlxd compat report`: counts by state and kind, every b10621 option counted once."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from mlxd.compat.manifest import STATES, available_kinds, load


def test_report_counts_every_option_once() -> None:
    proc = subprocess.run([str(Path(sys.executable).parent / "mlxd"), "compat", "report", "--format", "json"],
                          capture_output=True, text=True, timeout=60, check=True)
    everything = json.loads(proc.stdout)
    assert set(everything) == set(available_kinds())
    data = everything["options"]
    assert sum(data["all"].values()) == 249
    assert data["all"] == {s: Counter(e.state for e in load("options").entries).get(s, 0) for s in STATES}
    kinds = {g: c for g, c in data.items() if g.startswith("kind: ")}
    assert sum(sum(c.values()) for c in kinds.values()) == 249


def test_report_text_lists_every_state() -> None:
    proc = subprocess.run([str(Path(sys.executable).parent / "mlxd"), "compat", "report"],
                          capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.startswith("options (b10621): 249 entries")
    assert all(state in proc.stdout for state in STATES)


def test_flag_surface_lists_every_spelling_once() -> None:
    proc = subprocess.run([str(Path(sys.executable).parent / "mlxd"), "compat", "flags", "--format", "json"],
                          capture_output=True, text=True, timeout=60, check=True)
    rows = json.loads(proc.stdout)
    b10621 = [r for r in rows if r["origin"] == "b10621"]
    assert len(b10621) == len({r["spelling"] for r in b10621}) == 407
    assert {r["state"] for r in rows if r["origin"] == "mlxd"} == {"mlxd"}
    assert next(r for r in rows if r["spelling"] == "-nocb") == {
        "spelling": "-nocb", "option": "cont-batching", "origin": "b10621", "kind": "bool_pair", "negative": True,
        "env": ["LLAMA_ARG_CONT_BATCHING", "LLAMA_ARG_NO_CONT_BATCHING"],
        "state": load("options").by_id()["cont-batching"].state}
