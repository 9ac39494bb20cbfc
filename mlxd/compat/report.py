"""``mlxd compat report``: the manifest's counts by state, per kind and, for options, per upstream category."""

from __future__ import annotations

import json
from collections import Counter

from mlxd.compat.manifest import STATES, available_kinds, load


def counts() -> dict[str, dict[str, dict[str, int]]]:
    """manifest kind -> group ("all", "kind: ...", "category: ...") -> state -> count."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for kind in available_kinds():
        manifest = load(kind)
        groups: dict[str, Counter[str]] = {"all": Counter(e.state for e in manifest.entries)}
        for key in ("kind", "category"):
            for e in manifest.entries:
                if e.upstream.get(key):
                    groups.setdefault(f"{key}: {e.upstream[key]}", Counter())[e.state] += 1
        out[kind] = {g: {s: c.get(s, 0) for s in STATES} for g, c in groups.items()}
    return out


def render(fmt: str = "text") -> str:
    data = counts()
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    width = max([len(g) for kind in data.values() for g in kind] + [8]) + 2
    lines = []
    for kind, groups in data.items():
        total = sum(groups["all"].values())
        lines.append(f"{kind} (b10621): {total} entries")
        lines.append("  " + "".ljust(width) + "".join(s.rjust(16) for s in STATES))
        for group, states in groups.items():
            lines.append("  " + group.ljust(width) + "".join(str(states[s]).rjust(16) for s in STATES))
        lines.append("")
    return "\n".join(lines)
