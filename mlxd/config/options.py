"""The option table: one :class:`OptionSpec` per option, b10621's and mlxd's own.

b10621's rows join the packaged upstream inventory (spellings, env names, kind) with :mod:`mlxd.config.facts`
(type, default, domain, treatment); mlxd's own rows come from the facts table alone.
"""

from __future__ import annotations

import difflib
import enum
import json
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import mlxd.config.facts as facts  # the submodule itself: the package's __init__ imports this module
import mlxd.config.reasons as reasons


class Kind(enum.Enum):
    """How an option appears on the command line."""

    VALUE = "value"  # takes one value
    FLAG = "flag"  # value-less, no negative twin
    BOOL_PAIR = "bool_pair"  # --x / --no-x
    TWO_VALUES = "two_values"  # takes two values


class ValueType(enum.Enum):
    INT = "int"
    FLOAT = "float"
    STR = "str"
    BOOL = "bool"
    LIST = "list"  # list[str]
    PAIR = "pair"  # list[str] of two
    SCALED = "scaled"  # list of (FNAME, SCALE) pairs, given as FNAME:SCALE (--lora-scaled)


TREATMENTS = ("deferred", "supported", "inert", "refuse", "removed")


@dataclass(frozen=True)
class OptionSpec:
    """One option: its spellings, env names, type, default, domain and how mlxd treats it."""

    name: str
    origin: str  # "b10621" or "mlxd"
    kind: Kind
    value_type: ValueType
    optional: bool  # None is a valid value (and usually the default)
    default: Any
    long: tuple[str, ...]
    short: tuple[str, ...]
    negatives: tuple[str, ...]
    env: tuple[str, ...]  # positive env names, lowest priority first
    env_negative: str | None  # the implicit LLAMA_ARG_NO_* alias of a bool pair
    live: bool = True
    secret: bool = False
    accumulate: bool = False  # env and command-line values add up (docs/precedence.md rule 1.4)
    append: bool = False  # a repeated argument appends (rule 1.9)
    split: bool = False  # a value is a comma-separated list
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    domain: str | None = None  # a custom domain check, see mlxd.config.values
    treatment: str = "deferred"
    inert_values: tuple[str, ...] | None = None
    check: str | None = None  # a custom refusal rule, see mlxd.config.refusals
    reason: tuple[str, str] | None = None  # (why, alternative) for refusals
    reason_key: str | None = None  # the key of ``reason`` in reasons.REASONS (reasons.GAPS: an mlxd gap, not MLX's)
    category: str = "mlxd"
    status: str = "active"
    help: str = ""
    placeholder: str | None = None
    # What a change of the option does to a running daemon (see facts.EFFECTS); every option has at least one.
    effects: tuple[str, ...] = ("live",)

    @property
    def field(self) -> str:
        """The attribute of :class:`mlxd.config.Config` that holds this option."""
        return field_name(self.name)

    @property
    def spellings(self) -> tuple[str, ...]:
        """Every command-line spelling, positive and negative."""
        return self.short + self.long + self.negatives

    @property
    def keys(self) -> tuple[str, ...]:
        """Every file key (TOML, INI): each spelling without its leading dashes."""
        return tuple(s.lstrip("-") for s in self.spellings)

    @property
    def takes_value(self) -> bool:
        return self.kind in (Kind.VALUE, Kind.TWO_VALUES)

    @property
    def is_bool(self) -> bool:
        return self.kind in (Kind.FLAG, Kind.BOOL_PAIR)


def field_name(name: str) -> str:
    """Config field for an option name: '-' and '.' become '_'."""
    return name.replace("-", "_").replace(".", "_")


def _parse_default(token: str, vtype: ValueType) -> Any:
    if token == "~":
        return None
    if token == "@breakers":
        return list(facts.DRY_SEQUENCE_BREAKERS)
    if vtype is ValueType.LIST:
        return [] if token == "[]" else token.split(",")
    if vtype is ValueType.SCALED:
        assert token == "[]", "a scaled list defaults to empty"
        return []
    if vtype is ValueType.INT:
        return int(token)
    if vtype is ValueType.FLOAT:
        return float(token)
    if vtype is ValueType.BOOL:
        return token == "true"
    return token


def _attributes(words: list[str]) -> dict[str, Any]:
    """Turn a facts row's attribute words into OptionSpec keyword arguments."""
    out: dict[str, Any] = {}
    why: str | None = None
    for w in words:
        if w == "restart":
            out["live"] = False
        elif w in ("secret", "append", "split"):
            out[w] = True
        elif w == "acc":
            out["accumulate"] = True
        elif w.startswith("{"):
            out["choices"] = tuple(w.strip("{}").split(","))
        elif w.startswith(">="):
            out["minimum"] = float(w[2:])
        elif ".." in w:
            lo, hi = w.split("..")
            out["minimum"], out["maximum"] = float(lo), float(hi)
        elif w.startswith("dom="):
            out["domain"] = w[4:]
        elif w.startswith("inert="):
            out["treatment"] = "inert"
            out["inert_values"] = tuple(w[6:].split("|"))
        elif w.startswith("check="):
            out["check"] = w[6:]
        elif w.startswith("why="):
            why = w[4:]
        elif w.startswith("effect="):
            out["effects"] = tuple(w[7:].split(","))
        elif w in TREATMENTS:
            out["treatment"] = w
        else:
            raise ValueError(f"unknown facts attribute {w!r}")
    unknown = set(out.get("effects", ())) - set(facts.EFFECTS)
    if unknown:
        raise ValueError(f"unknown effect {sorted(unknown)}")
    out["_why"] = why
    return out


def _effects(attrs: dict[str, Any], category: str) -> tuple[str, ...]:
    """A row's effects: its own ``effect=`` words, else ``restart`` for a restart option, else nothing to do for an
    option whose every value is inert or refused, else its category's default (facts.CATEGORY_EFFECTS)."""
    if "effects" in attrs:
        return tuple(attrs["effects"])
    if attrs.get("live") is False:
        return ("restart",)
    if attrs.get("treatment") in ("inert", "refuse", "removed"):
        return ("live",)
    return facts.CATEGORY_EFFECTS.get(category, ("live",))


def _rows(text: str) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for line in text.strip().splitlines():
        words = shlex.split(line, posix=True)
        rows[words[0]] = words[1:]
    return rows


def _reason(name: str, why: str | None, category: str) -> tuple[str, str]:
    if why:
        return reasons.REASONS[why]
    return reasons.REASONS.get(name) or reasons.CATEGORY_REASONS.get(category) or reasons.CATEGORY_REASONS["common"]


@cache
def inventory() -> list[dict[str, Any]]:
    """The packaged b10621 option inventory (a copy of the upstream facts)."""
    text = resources.files("mlxd.compat").joinpath("b10621/options.json").read_text(encoding="utf-8")
    entries: list[dict[str, Any]] = json.loads(text)["options"]
    return entries


def upstream_name(entry: dict[str, Any]) -> str:
    """b10621's canonical name of an inventory entry: its last long positive spelling without dashes."""
    return str(entry["long"][-1]).lstrip("-")


_KINDS = {"flag": Kind.FLAG, "boolean pair": Kind.BOOL_PAIR, "takes one value": Kind.VALUE,
          "takes two values": Kind.TWO_VALUES}


def _kind(entry: dict[str, Any]) -> Kind:
    for prefix, kind in _KINDS.items():
        if entry["kind"].startswith(prefix):
            return kind
    raise ValueError(f"unknown inventory kind {entry['kind']!r}")


def _b10621_specs() -> list[OptionSpec]:
    rows = _rows(facts.B10621_ROWS)
    specs = []
    for entry in inventory():
        name = upstream_name(entry)
        words = rows.pop(name)
        vtype_word, default_word, rest = words[0], words[1], words[2:]
        vtype = ValueType(vtype_word.rstrip("?"))
        attrs = _attributes(rest)
        why = attrs.pop("_why")
        negatives = tuple(entry["negative_short"]) + tuple(entry["negative_long"])
        long = tuple(s for s in entry["long"])
        short = tuple(s for s in entry["short"])
        treatment = attrs.get("treatment", "deferred")
        if entry["status"].startswith("removed"):
            treatment = attrs["treatment"] = "removed"
            why = "removed"
        attrs["effects"] = _effects(attrs, entry["category"])
        reason = None
        key = why or attrs.get("check") or (name if name in reasons.REASONS else None)
        if treatment in ("refuse", "removed") or attrs.get("inert_values") or attrs.get("check") or key in reasons.GAPS:
            reason = _reason(attrs.get("check") or name, why, entry["category"])
        specs.append(OptionSpec(
            name=name, origin="b10621", kind=_kind(entry), value_type=vtype, optional=vtype_word.endswith("?"),
            default=_parse_default(default_word, vtype), long=long, short=short, negatives=negatives,
            env=(entry["env"],) if entry["env"] else (), env_negative=entry["env_negative_alias"],
            reason=reason, reason_key=key, category=entry["category"], status=entry["status"],
            help=entry["help_first_sentence"] or "", placeholder=entry["value_placeholder"], **attrs,
        ))
    if rows:
        raise ValueError(f"facts rows without an inventory entry: {sorted(rows)}")
    return specs


def _mlxd_specs() -> list[OptionSpec]:
    specs = []
    for name, words in _rows(facts.MLXD_ROWS).items():
        kind_word, vtype_word, default_word, rest = words[0], words[1], words[2], words[3:]
        vtype = ValueType(vtype_word.rstrip("?"))
        attrs = _attributes(rest)
        attrs.pop("_why")
        attrs["effects"] = _effects(attrs, "mlxd")
        env = "MLXD_" + name.upper().replace("-", "_")
        pair = kind_word == "pair"
        specs.append(OptionSpec(
            name=name, origin="mlxd", kind=Kind.BOOL_PAIR if pair else Kind.VALUE, value_type=vtype,
            optional=vtype_word.endswith("?"), default=_parse_default(default_word, vtype),
            long=(f"--{name}",), short=(), negatives=(f"--no-{name}",) if pair else (), env=(env,),
            env_negative=("MLXD_NO_" + env[5:]) if pair else None, help=facts.MLXD_HELP[name], **attrs,
        ))
    return specs


class OptionTable:
    """Every option, with lookups by name, spelling, file key and env name."""

    def __init__(self, specs: list[OptionSpec]) -> None:
        self.specs: tuple[OptionSpec, ...] = tuple(specs)
        self.by_name: dict[str, OptionSpec] = {}
        self.by_spelling: dict[str, OptionSpec] = {}
        self.by_env: dict[str, OptionSpec] = {}
        for spec in specs:
            if spec.name in self.by_name:
                raise ValueError(f"duplicate option name {spec.name}")
            self.by_name[spec.name] = spec
            for s in spec.spellings:
                if s in self.by_spelling:
                    raise ValueError(f"spelling {s} belongs to {self.by_spelling[s].name} and {spec.name}")
                self.by_spelling[s] = spec
            for e in spec.env + ((spec.env_negative,) if spec.env_negative else ()):
                self.by_env[e] = spec
        self.by_key: dict[str, OptionSpec] = {}
        for spelling, spec in self.by_spelling.items():  # '-fit' and '--fit' share the key 'fit', harmlessly
            key = spelling.lstrip("-")
            if self.by_key.setdefault(key, spec) is not spec:
                raise ValueError(f"file key {key} names two options")

    def __iter__(self) -> Iterator[OptionSpec]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def get(self, name: str) -> OptionSpec:
        """The option with canonical name ``name`` (KeyError if none)."""
        return self.by_name[name]

    def suggest(self, word: str, *, keys: bool = False) -> str | None:
        """The closest known spelling (or file key), for a did-you-mean."""
        pool = list(self.by_key) if keys else list(self.by_spelling)
        probe = word.replace("_", "-")
        if keys and probe in self.by_key:
            return probe
        if not keys and probe in self.by_spelling:
            return probe
        match = difflib.get_close_matches(probe, pool, n=1, cutoff=0.6)
        return match[0] if match else None


@cache
def table() -> OptionTable:
    """The option table (built once)."""
    return OptionTable(_b10621_specs() + _mlxd_specs())
