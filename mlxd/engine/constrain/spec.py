"""What a request asks to be constrained to, before it is compiled: the grammar source and its lazy triggers."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Literal

SourceKind = Literal["gbnf", "json_schema", "lark"]


class TriggerType(IntEnum):
    """llama.cpp's ``common_grammar_trigger_type`` numbering, as ``grammar_triggers`` carries it on the wire."""

    TOKEN = 0
    WORD = 1
    PATTERN = 2
    PATTERN_FULL = 3


@dataclass(frozen=True)
class Trigger:
    """What wakes a lazy grammar: a sampled token, a word or a regex over the generated text."""

    type: TriggerType
    value: str
    token: int | None = None


@dataclass(frozen=True)
class ConstraintSpec:
    """One constraint: a GBNF grammar, a JSON schema (serialized) or a Lark grammar, and how it starts.

    ``origin`` names the field or option the source came from, so a compile error can say where it is.
    A lazy constraint leaves generation free until one of ``triggers`` fires.
    """

    kind: SourceKind
    source: str
    origin: str
    lazy: bool = False
    triggers: tuple[Trigger, ...] = ()
    preserved_tokens: tuple[str, ...] = ()
