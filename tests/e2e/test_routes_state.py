"""``mlxd/compat/b10621/routes_state.json`` against the real router, in both directions, and its test ids."""

from __future__ import annotations

import json
import re
from pathlib import Path

from mlxd.api.app import create_app
from mlxd.api.state import ServingState
from mlxd.config import Config

REPO = Path(__file__).resolve().parents[2]
STATE_FILE = REPO / "mlxd" / "compat" / "b10621" / "routes_state.json"
STATES = {"supported", "aliased", "not_applicable", "deferred", "by_design"}


def mounted() -> set[tuple[str, str]]:
    app = create_app(ServingState(config=Config()), name="mlxd_routes_state")
    pairs = set()
    for route in app.router.routes:
        path = "/" + re.sub(r"<(\w+)(:[^>]*)?>", r":\1", route.path)
        for method in route.methods:
            if method not in ("HEAD", "OPTIONS"):
                pairs.add((method, path))
    return pairs


def test_every_entry_is_well_formed() -> None:
    doc = json.loads(STATE_FILE.read_text())
    assert len(doc["routes"]) == 50
    for entry in doc["routes"] + doc["conditional_routes"] + doc["behaviours"]:
        assert entry["state"] in STATES
        assert isinstance(entry["divergence"], list) and all(isinstance(d, str) and d for d in entry["divergence"])
        assert (entry["divergence"] == []) == (entry["state"] == "supported"), entry
        assert ("rationale" in entry) == (entry["state"] == "by_design"), entry
        if entry["state"] != "deferred":
            assert entry["test"], entry


def test_router_and_entries_agree() -> None:
    doc = json.loads(STATE_FILE.read_text())
    entries = {(e["method"], e["path"]): e for e in doc["routes"]}
    routes = mounted()
    assert routes <= set(entries), sorted(routes - set(entries))
    served = {key for key, e in entries.items() if e["state"] in ("supported", "by_design", "aliased")}
    assert served <= routes, sorted(served - routes)


def test_named_tests_exist() -> None:
    doc = json.loads(STATE_FILE.read_text())
    for entry in doc["routes"] + doc["conditional_routes"] + doc["behaviours"]:
        if not entry["test"]:
            continue
        file, _, name = entry["test"].partition("::")
        function = name.split("[", 1)[0]
        assert re.search(rf"^def {function}\(", (REPO / file).read_text(), re.M), entry["test"]
