"""``mlxd/compat/b10621/native_fields_state.json``: one honest entry per native request field, each pinned."""

from __future__ import annotations

import json
import re
from pathlib import Path

from mlxd.schemas.completion import NOT_YET

REPO = Path(__file__).resolve().parents[2]
STATE_FILE = REPO / "mlxd" / "compat" / "b10621" / "native_fields_state.json"
STATES = {"supported", "aliased", "not_applicable", "deferred", "by_design"}
# native_fields.json: 66 top-level schema fields + stream_options.include_usage, 5 keys read outside the schema,
# 4 /infill keys.
COUNTS = {"schema": 67, "outside_schema": 5, "infill": 4}


def _entries() -> list[dict]:
    return json.loads(STATE_FILE.read_text())["entries"]


def test_every_field_has_one_well_formed_entry() -> None:
    entries = _entries()
    for kind, count in COUNTS.items():
        names = [e["name"] for e in entries if e["kind"] == kind]
        assert len(names) == count == len(set(names)), kind
    for entry in entries:
        assert entry["state"] in STATES
        assert isinstance(entry["divergence"], list) and all(isinstance(d, str) and d for d in entry["divergence"])
        assert (entry["divergence"] == []) == (entry["state"] == "supported"), entry
        assert ("rationale" in entry) == (entry["state"] == "by_design"), entry
        assert entry["test"], entry


def test_named_tests_exist() -> None:
    for entry in _entries():
        file, _, name = entry["test"].partition("::")
        function = name.split("[", 1)[0]
        assert re.search(rf"^def {function}\(", (REPO / file).read_text(), re.M), entry["test"]


def test_refused_fields_are_not_claimed() -> None:
    """A field the native parser refuses is never recorded as supported."""
    by_name = {e["name"]: e for e in _entries() if e["kind"] == "schema"}
    for name in NOT_YET:
        if name in by_name:
            assert by_name[name]["state"] in ("deferred", "by_design"), name
            assert by_name[name]["divergence"], name
