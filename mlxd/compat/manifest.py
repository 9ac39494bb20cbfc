"""The b10621 compat manifest: one JSON file per kind, each a list of entries with a state, the divergence and the
pinning test: ``manifest-options.json`` (written by :mod:`mlxd.compat.seed`), ``routes_state.json`` and
``native_fields_state.json`` (kept by the HTTP surface).

An entry's ``divergence`` is a list of observable differences (or, for a deferred entry, of what is missing), empty
exactly when it is supported. A ``by_design`` entry also says why the difference is permanent, in a ``rationale``:
``architectural`` (it follows from MLX or from how mlxd is built) or ``policy`` (a choice, with the condition under
which it should be revisited); no other state carries one.

The loader and the validator are generic over kinds; what a kind's entries must cover is checked by its tests.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

STATES = ("supported", "aliased", "not_applicable", "deferred", "by_design")
KINDS = ("options", "routes", "native_fields")
TAG = "b10621"

# Why a surface is `not_applicable`: the vocabulary of "no MLX equivalent". An entry of that state names one in
# `basis`; a feature MLX could serve and mlxd lacks has no basis here and is `deferred`.
BASES: dict[str, str] = {
    "ggml": "a ggml or libllama backend knob: threads, CPU affinity, polling, devices, offload and placement, "
            "memory mapping and locking, RPC, NUMA, internal counters",
    "gguf": "GGUF files, their metadata, and the downloads and presets that fetch them",
    "upstream-removed": "b10621 itself rejects it as removed",
    "upstream-internal": "internal to llama-server's own endpoints, overwritten there, not a client surface",
    "mlx-kernel": "MLX always computes it one way (its fused attention kernel)",
}

# Words that describe a missing mlxd feature; a `not_applicable` entry must not use them (it is then `deferred`).
GAP_WORDS = re.compile(r"\bnot (?:yet|implemented|supported|offered|served)\b|\bnot yet\b", re.IGNORECASE)


RATIONALE_KINDS = ("architectural", "policy")


@dataclass(frozen=True)
class Rationale:
    """Why a by_design difference is permanent: ``architectural`` (MLX, or how mlxd is built, decides it) or
    ``policy`` (mlxd's choice; ``revisit_if`` names what would change it)."""

    kind: str
    reason: str
    revisit_if: str = ""

    def to_json(self) -> dict[str, str]:
        out = {"kind": self.kind, "reason": self.reason}
        return out | ({"revisit_if": self.revisit_if} if self.revisit_if else {})


@dataclass(frozen=True)
class Entry:
    """One upstream surface: an option, a route or a native request field."""

    id: str  # option name, "METHOD /path", or field name
    state: str
    upstream: dict[str, Any]
    divergence: tuple[str, ...] = ()  # the observable differences, or what is missing; empty only when supported
    test: str = ""  # the pytest node id that pins the claim
    notes: str = ""
    basis: str = ""  # a key of BASES, for a not_applicable entry only
    rationale: Rationale | None = None  # for a by_design entry only

    @property
    def divergence_text(self) -> str:
        """The differences as one line (docs, messages)."""
        return "; ".join(self.divergence)


def differences(text: str) -> tuple[str, ...]:
    """Prose of clauses joined by "; " (outside brackets) as a list of differences."""
    out: list[str] = []
    depth, start = 0, 0
    for i, c in enumerate(text):
        depth += (c in "([{") - (c in ")]}")
        if depth == 0 and text.startswith("; ", i):
            out.append(text[start:i].strip())
            start = i + 2
    out.append(text[start:].strip())
    return tuple(d for d in out if d)


def divergence_of(value: Any) -> tuple[str, ...]:
    """A JSON ``divergence``: a list of strings (checked data; prose in one string is refused)."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"divergence must be a list of strings, got {value!r}")
    return tuple(value)


def rationale_of(value: Any) -> Rationale | None:
    """A JSON ``rationale`` object, or None; unknown keys are refused."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"kind", "reason", "revisit_if"}:
        raise ValueError(f"rationale must be an object with kind, reason and revisit_if, got {value!r}")
    return Rationale(kind=str(value.get("kind", "")), reason=str(value.get("reason", "")),
                     revisit_if=str(value.get("revisit_if", "")))


@dataclass(frozen=True)
class Manifest:
    kind: str
    tag: str
    entries: tuple[Entry, ...] = field(default_factory=tuple)

    def by_id(self) -> dict[str, Entry]:
        return {e.id: e for e in self.entries}


def _options_entries(doc: dict[str, Any]) -> list[Entry]:
    return [Entry(**(e | {"divergence": divergence_of(e.get("divergence", [])),
                         "rationale": rationale_of(e.get("rationale"))})) for e in doc["entries"]]


def _route_entries(doc: dict[str, Any]) -> list[Entry]:
    out = []
    for group in ("routes", "conditional_routes"):
        for e in doc.get(group, []):
            upstream = {k: e[k] for k in ("method", "path", "mode") if k in e} | {"kind": group}
            out.append(Entry(id=f"{e['method']} {e['path']}", state=e["state"], upstream=upstream,
                             divergence=divergence_of(e.get("divergence", [])), test=e.get("test") or "",
                             basis=e.get("basis") or "", rationale=rationale_of(e.get("rationale"))))
    return out


def _field_id(e: dict[str, Any]) -> str:
    # /infill reads a few keys of its own, one of them spelled like /completion's prompt.
    return f"{e['name']} (/infill)" if e.get("kind") == "infill" else e["name"]


def _field_entries(doc: dict[str, Any]) -> list[Entry]:
    return [Entry(id=_field_id(e), state=e["state"], upstream={"aliases": e.get("aliases", []), "kind": e.get("kind")},
                  divergence=divergence_of(e.get("divergence", [])), test=e.get("test") or "",
                  basis=e.get("basis") or "", rationale=rationale_of(e.get("rationale")))
            for e in doc["entries"]]


# kind -> (file under the package, how its entries read)
_FILES: dict[str, tuple[str, Callable[[dict[str, Any]], list[Entry]]]] = {
    "options": ("manifest-options.json", _options_entries),
    "routes": ("routes_state.json", _route_entries),
    "native_fields": ("native_fields_state.json", _field_entries),
}


def _file(kind: str) -> str:
    return f"{TAG}/{_FILES[kind][0]}"


def available_kinds() -> list[str]:
    """The kinds whose manifest file is packaged."""
    root = resources.files("mlxd.compat")
    return [k for k in KINDS if root.joinpath(_file(k)).is_file()]


def load(kind: str) -> Manifest:
    """The packaged manifest of ``kind``."""
    text = resources.files("mlxd.compat").joinpath(_file(kind)).read_text(encoding="utf-8")
    return Manifest(kind=kind, tag=TAG, entries=tuple(_FILES[kind][1](json.loads(text))))


def from_json(doc: dict[str, Any]) -> Manifest:
    """An options-format manifest document."""
    return Manifest(kind=doc["kind"], tag=doc["tag"], entries=tuple(_options_entries(doc)))


def to_json(manifest: Manifest) -> str:
    doc = {"kind": manifest.kind, "tag": manifest.tag,
           "states": {s: sum(e.state == s for e in manifest.entries) for s in STATES},
           "entries": [_entry_json(e) for e in manifest.entries]}
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def _entry_json(e: Entry) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in e.__dict__.items():
        if k == "divergence":
            out[k] = list(v)
        elif k == "rationale":
            if v is not None:
                out[k] = v.to_json()
        elif v or k in ("id", "state", "upstream"):
            out[k] = v
    return out


def package_path(kind: str) -> Path:
    """Where the manifest of ``kind`` lives in a source checkout (for the tools that write it)."""
    return Path(__file__).parent / _file(kind)


def validate(manifest: Manifest, repo_root: Path | None = None) -> list[str]:
    """Problems with a manifest's own shape: unknown states, duplicate ids, a supported entry with a divergence,
    a non-supported one without, an empty difference, a missing pinning test (checked against ``repo_root`` when
    given), a ``not_applicable`` entry that is really an mlxd gap (without a basis in :data:`BASES`, or saying in
    its divergence that something is not yet implemented, supported, offered or served), a ``by_design`` entry
    without a well-formed rationale, and a rationale on any other state."""
    problems = []
    if manifest.kind not in KINDS:
        problems.append(f"unknown manifest kind {manifest.kind!r}")
    seen: set[str] = set()
    for e in manifest.entries:
        where = f"{manifest.kind}:{e.id}"
        if e.id in seen:
            problems.append(f"{where}: duplicate entry")
        seen.add(e.id)
        if e.state not in STATES:
            problems.append(f"{where}: unknown state {e.state!r}")
        if e.state == "supported" and e.divergence:
            problems.append(f"{where}: supported entries have no divergence")
        if e.state != "supported" and not e.divergence:
            problems.append(f"{where}: a {e.state} entry must say what differs or is missing")
        if any(not d.strip() for d in e.divergence):
            problems.append(f"{where}: an empty difference in the divergence list")
        problems += [f"{where}: {p}" for p in _rationale_problems(e)]
        if e.state == "not_applicable":
            if e.basis not in BASES:
                problems.append(f"{where}: a not_applicable entry names why MLX has no equivalent (basis one of "
                                f"{', '.join(BASES)}), got {e.basis!r}; an mlxd gap is deferred")
            if GAP_WORDS.search(e.divergence_text):
                problems.append(f"{where}: the divergence names a missing mlxd feature; such an entry is deferred")
        elif e.basis:
            problems.append(f"{where}: only a not_applicable entry has a basis")
        if not e.test:
            problems.append(f"{where}: no pinning test")
        elif repo_root is not None and not test_exists(repo_root, e.test):
            problems.append(f"{where}: pinning test {e.test} does not exist")
    return problems


def _rationale_problems(e: Entry) -> list[str]:
    r = e.rationale
    if e.state != "by_design":
        return [f"only a by_design entry has a rationale (this one is {e.state})"] if r is not None else []
    if r is None:
        return ["a by_design entry needs a rationale: kind (architectural or policy), reason, and revisit_if for a "
                "policy"]
    problems = []
    if r.kind not in RATIONALE_KINDS:
        problems.append(f"rationale kind must be one of {', '.join(RATIONALE_KINDS)}, got {r.kind!r}")
    if not r.reason.strip():
        problems.append("the rationale gives no reason")
    if r.kind == "policy" and not r.revisit_if.strip():
        problems.append("a policy rationale says when to revisit it (revisit_if)")
    return problems


def test_exists(repo_root: Path, node_id: str) -> bool:
    """Whether a pytest node id ``path::function`` (parameters allowed) names a test function in a file."""
    import ast

    path, _, name = node_id.partition("::")
    file = repo_root / path
    if not name or not file.is_file():
        return False
    name, _, param = name.partition("[")
    name = name.split("::")[-1]
    text = file.read_text(encoding="utf-8")
    tree = ast.parse(text)
    if not any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name for n in ast.walk(tree)):
        return False
    # A parameter id must at least name values the file spells (pytest joins several with "-").
    return all(part in text for part in param.rstrip("]").split("-") if part)
