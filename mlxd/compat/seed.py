"""Writes ``manifest-options.json`` from the option table: ``python -m mlxd.compat.seed``.

A new b10621 option gets an entry whose state follows the table (refused or inert-only options are
``not_applicable`` with the table's basis, unless their reason is one of mlxd's gaps (``reasons.GAPS``: ``deferred``)
or one of its permanent choices (``reasons.POLICIES``: ``by_design``); everything else is ``deferred``). An existing entry keeps its state, divergence and test, so
promotions made by hand (``deferred`` -> ``supported``) survive, unless the table now refuses the option or stopped
refusing it; the upstream facts are always refreshed.
"""

from __future__ import annotations

import sys
from typing import Any

from mlxd.compat.manifest import TAG, Entry, Manifest, Rationale, differences, load, package_path, to_json
from mlxd.config import reasons
from mlxd.config.options import OptionSpec, inventory, table, upstream_name

OPTIONS_TEST = "tests/compat/test_compat_options.py"
PINS = {
    "not_applicable": f"{OPTIONS_TEST}::test_not_applicable_options_are_refused_or_inert",
    "deferred": f"{OPTIONS_TEST}::test_every_spelling_parses",
    "gap": f"{OPTIONS_TEST}::test_gap_options_are_refused_or_inert_until_they_work",
    "policy": f"{OPTIONS_TEST}::test_policy_options_are_refused_by_design",
}
DEFERRED = ("parsed, typed and layered (see `mlxd config explain`); the behaviour behind it is not wired yet")

# Why each of mlxd's permanent refusals (reasons.POLICIES) is a policy, and what would change it.
POLICY_RATIONALE = Rationale(
    kind="policy",
    reason="mlxd serves the HTTP API, not llama-server's web UI, its static files, agent tools or MCP proxy; a UI is "
           "served by a separate web server that talks to the API",
    revisit_if="llama-server's web UI (or its tools or MCP proxy) is wanted from mlxd itself",
)


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


def is_gap(spec: OptionSpec) -> bool:
    """Whether the table refuses or ignores the option for want of an mlxd feature (a deferred entry)."""
    return spec.reason_key in reasons.GAPS and (spec.treatment in ("refuse", "removed", "inert"))


def is_policy(spec: OptionSpec) -> bool:
    """Whether the table refuses the option by mlxd's own permanent choice (a by_design entry)."""
    return spec.reason_key in reasons.POLICIES and spec.treatment in ("refuse", "removed", "inert")


def basis(spec: OptionSpec) -> str:
    """Why a refused or inert option has no MLX equivalent (a key of manifest.BASES)."""
    return reasons.BASIS.get(spec.reason_key or "", "ggml")


def classify(spec: OptionSpec) -> tuple[str, str]:
    """(state, divergence) that the table implies for a new entry."""
    if is_policy(spec):
        why, instead = spec.reason or ("", "")
        return "by_design", f"refused unless left at its default, by design: {why}; {instead}"
    if is_gap(spec):
        why, instead = spec.reason or ("", "")
        if spec.treatment == "inert" and not spec.inert_values:
            return "deferred", f"accepted and ignored: {why}"
        allowed = (f"only {', '.join(spec.inert_values)} accepted" if spec.inert_values
                   else "refused unless left at its default")
        return "deferred", f"{allowed}, until mlxd implements it: {why}; {instead}"
    if spec.check == "ngl":
        why, _ = spec.reason or ("", "")
        return "not_applicable", ("a count at or above the checkpoint's layer count, auto, all and -1 are accepted "
                                  "(MLX keeps the whole model on its device), and 0 where MLX runs on the CPU "
                                  f"(CPU-only); a partial count is refused when the model loads, before any weight "
                                  f"is read: {why}")
    if spec.check == "device":
        why, _ = spec.reason or ("", "")
        return "not_applicable", ("only none (CPU-only) is accepted, where MLX runs on the CPU, checked when the "
                                  f"model loads; device names are refused: {why}")
    if spec.treatment in ("refuse", "removed"):
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


def stale(spec: OptionSpec, prev: Entry) -> bool:
    """Whether a recorded not_applicable entry no longer says what the table does (its reason or its treatment)."""
    if prev.state != "not_applicable":
        return False
    text = prev.divergence_text
    if spec.check in ("ngl", "device"):
        return text != classify(spec)[1]
    if spec.reason is not None:
        return spec.reason[0] not in text
    return spec.treatment == "inert" and not text.startswith("accepted and inert")


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
        gap = is_gap(spec)
        policy = is_policy(spec)
        test = PINS["gap" if gap else "policy" if policy else state]
        prev = old.get(name)
        # A recorded entry survives unless the table now says otherwise about refusing (not_applicable) or about
        # the refusal being a gap or a policy; those entries follow the table's reason.
        follows_table = gap or policy or prev is None or prev.test in (PINS["gap"], PINS["policy"])
        listed, rationale = differences(divergence), POLICY_RATIONALE if policy else None
        if prev is not None and not follows_table and (prev.state == "not_applicable") == (state == "not_applicable"):
            if not stale(spec, prev):
                state, listed, test, rationale = prev.state, prev.divergence, prev.test, prev.rationale
        entries.append(Entry(id=name, state=state, upstream=upstream_facts(inv), divergence=listed, test=test,
                             basis=basis(spec) if state == "not_applicable" else "", rationale=rationale))
    return Manifest(kind="options", tag=TAG, entries=tuple(entries))


def main() -> int:
    package_path("options").write_text(to_json(build()), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
