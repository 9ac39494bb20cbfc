"""The flag surface mlxd's parser accepts: every spelling, what it sets and the manifest's state for it.

``mlxd compat flags`` prints it, so that it can be compared with ``llama-server --help`` of b10621.
"""

from __future__ import annotations

import json
from typing import Any

from mlxd.compat.manifest import load
from mlxd.config.options import table


def surface() -> list[dict[str, Any]]:
    """One row per accepted spelling, in table order."""
    states = load("options").by_id()
    rows = []
    for spec in table():
        entry = states.get(spec.name)
        for spelling in spec.spellings:
            rows.append({
                "spelling": spelling,
                "option": spec.name,
                "origin": spec.origin,
                "kind": spec.kind.value,
                "negative": spelling in spec.negatives,
                "env": list(spec.env) + ([spec.env_negative] if spec.env_negative else []),
                "state": entry.state if entry else "mlxd",
            })
    return rows


def render(fmt: str = "text") -> str:
    rows = surface()
    if fmt == "json":
        return json.dumps(rows, indent=1) + "\n"
    width = max(len(r["spelling"]) for r in rows) + 2
    return "".join(f"{r['spelling'].ljust(width)}{r['option']:<32}{r['kind']:<11}{r['state']}\n" for r in rows)
