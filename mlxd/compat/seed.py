"""Writes ``manifest-options.json`` from the option table: ``python -m mlxd.compat.seed``.

A new b10621 option gets an entry whose state follows the table (refused or inert-only options are
``not_applicable``; everything else is ``deferred``). An existing entry keeps its state, divergence and test, so
promotions made by hand (``deferred`` -> ``supported``) survive, unless the table now refuses the option or stopped
refusing it; the upstream facts are always refreshed.
"""

from __future__ import annotations

import sys
from typing import Any

from mlxd.compat.manifest import TAG, Entry, Manifest, load, package_path, to_json
from mlxd.config.options import OptionSpec, inventory, table, upstream_name

OPTIONS_TEST = "tests/compat/test_compat_options.py"
PINS = {
    "not_applicable": f"{OPTIONS_TEST}::test_not_applicable_options_are_refused_or_inert",
    "deferred": f"{OPTIONS_TEST}::test_every_spelling_parses",
}
DEFERRED = ("parsed, typed and layered (see `mlxd config explain`); the behaviour behind it is not wired yet")


def upstream_facts(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "spellings": entry["spellings"],
        "env": [e for e in (entry["env"], entry["env_negative_alias"]) if e],
        "default": entry["default_in_help"],
        "kind": entry["kind"].split(" (")[0],
        "category": entry["category"],
        "status": entry["status"],
        "source": entry["source"],
    }


def classify(spec: OptionSpec) -> tuple[str, str]:
    """(state, divergence) that the table implies for a new entry."""
    if spec.treatment in ("refuse", "removed") or spec.check == "ngl":
        why, instead = spec.reason or ("", "")
        return "not_applicable", f"refused unless left at its default: {why}; {instead}"
    if spec.treatment == "inert":
        if spec.inert_values:
            why, instead = spec.reason or ("", "")
            return "not_applicable", (f"only {', '.join(spec.inert_values)} accepted (no effect under MLX); "
                                      f"other values refused: {why}")
        return "not_applicable", "accepted and inert: the ggml feature it tunes has no MLX counterpart"
    extra = ""
    if spec.check:
        why, instead = spec.reason or ("", "")
        extra = f"; refused where {why} ({instead})"
    return "deferred", DEFERRED + extra


def build() -> Manifest:
    try:
        old = load("options").by_id()
    except FileNotFoundError:
        old = {}
    tbl = table()
    entries = []
    for inv in inventory():
        name = upstream_name(inv)
        spec = tbl.get(name)
        state, divergence = classify(spec)
        test = PINS[state]
        prev = old.get(name)
        # A recorded entry survives unless the table now says otherwise about refusing (not_applicable).
        if prev is not None and (prev.state == "not_applicable") == (state == "not_applicable"):
            state, divergence, test = prev.state, prev.divergence, prev.test
        entries.append(Entry(id=name, state=state, upstream=upstream_facts(inv), divergence=divergence, test=test))
    return Manifest(kind="options", tag=TAG, entries=tuple(entries))


def main() -> int:
    package_path("options").write_text(to_json(build()), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
