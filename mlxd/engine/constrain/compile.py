"""Compiling a constraint into an llguidance grammar, bounded in size and work, with the parser's errors typed.

A compiled constraint keeps one pristine matcher; each request gets a cheap deep copy of it, so the lexer and
parser tables are built once per distinct source and tokenizer.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import llguidance
from llguidance.gbnf_to_lark import any_to_lark, gbnf_to_lark

from mlxd.engine.constrain.errors import ConstraintError
from mlxd.engine.constrain.spec import ConstraintSpec
from mlxd.engine.constrain.tokenizer import ConstraintTokenizer

# llama-server has no bound; an unbounded source would let one request pin the worker while it compiles.
MAX_SOURCE_BYTES = 256 * 1024
# llguidance's own fuel counters bound the compile (and per-step) work deterministically, which a wall-clock
# timeout could not: the Rust compile cannot be interrupted. The lexer fuel is llguidance's default, under a
# second of one core on slow hardware; the grammar-size limit is lower than its default.
LIMITS = dict(
    initial_lexer_fuel=1_000_000,
    step_lexer_fuel=200_000,
    max_grammar_size=200_000,
    max_lexer_states=100_000,
    verbose_errors=False,
)
_CACHE_SIZE = 64
# llama.cpp's json-schema-to-grammar allows one bounded run of whitespace between tokens; llguidance's default
# allows any amount, which lets a model pad forever instead of finishing the object. A keyword llguidance does
# not implement (uniqueItems, propertyNames, ...) is refused rather than ignored: output that seems constrained
# but is not would be worse than a 400.
JSON_OPTIONS = {"whitespace_pattern": r"(?: |\n{1,2}[ \t]{0,20})?", "lenient": False}


def _limits() -> llguidance.LLParserLimits:
    return llguidance.LLParserLimits(**LIMITS)  # type: ignore[arg-type]


def _error_prefix(spec: ConstraintSpec) -> str:
    # b10621 prefixes schema conversion errors with the field name; grammar errors come from the parser.
    return f'"{spec.origin}": ' if spec.kind == "json_schema" else f"{spec.origin}: failed to parse grammar: "


def to_llguidance(spec: ConstraintSpec) -> str:
    """The llguidance grammar document for ``spec``; raises ConstraintError on a source it cannot read."""
    if len(spec.source.encode("utf-8")) > MAX_SOURCE_BYTES:
        raise ConstraintError(
            f"{_error_prefix(spec)}the source is {len(spec.source.encode('utf-8'))} bytes, more than this server's "
            f"limit of {MAX_SOURCE_BYTES} bytes"
        )
    try:
        if spec.kind == "json_schema":
            options: Any = JSON_OPTIONS
            return llguidance.LLMatcher.grammar_from_json_schema(spec.source, overrides=options)
        lark = spec.source if spec.kind == "lark" else _gbnf_to_lark(spec.source)
        return llguidance.LLMatcher.grammar_from_lark(lark)
    except Exception as exc:  # the GBNF converter raises bare Exceptions; schema errors are ValueErrors
        raise ConstraintError(f"{_error_prefix(spec)}{exc}") from exc


def _gbnf_to_lark(source: str) -> str:
    # Like llama.cpp built with llguidance, a grammar already in Lark syntax (``%llguidance``, ``start:``) is
    # taken as is; a GBNF rule named ``start`` (``start ::= ...``) must not be mistaken for one.
    if "::=" not in source:
        return any_to_lark(source)
    # The converter names the root rule ``start``, so a rule of that name would clash with it.
    return gbnf_to_lark(_rename_rule(source, "start", "start-rule") if _GBNF_START.search(source) else source)


_GBNF_START = re.compile(r"(?m)^\s*start\s*::=")
# GBNF's lexemes that may contain a rule name's letters without being one: strings, character classes and
# comments (escapes inside the first two).
_GBNF_SKIP = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|#[^\n]*')


def _rename_rule(source: str, old: str, new: str) -> str:
    """``source`` with every reference to the rule ``old`` (outside strings, classes and comments) renamed."""
    while re.search(rf"(?<![\w-]){re.escape(new)}(?![\w-])", source):
        new += "-"
    name = re.compile(rf"(?<![\w-]){re.escape(old)}(?![\w-])")
    out, last = [], 0
    for skipped in _GBNF_SKIP.finditer(source):
        out.append(name.sub(new, source[last : skipped.start()]))
        out.append(skipped.group())
        last = skipped.end()
    out.append(name.sub(new, source[last:]))
    return "".join(out)


def validate(spec: ConstraintSpec) -> str:
    """Check ``spec`` without a tokenizer (at startup, before a model is loaded); returns the grammar document."""
    grammar = to_llguidance(spec)
    message = llguidance.LLMatcher.validate_grammar(grammar, None, limits=_limits())
    if message and not message.startswith("WARNING"):
        raise ConstraintError(f"{_error_prefix(spec)}{_diagnosis(message)}")
    return grammar


@dataclass(frozen=True)
class CompiledConstraint:
    """A constraint ready to run: its validated grammar and a pristine matcher to copy per request."""

    spec: ConstraintSpec
    grammar: str
    pristine: llguidance.LLMatcher

    def new_matcher(self) -> llguidance.LLMatcher:
        """A fresh matcher at the grammar's start."""
        return self.pristine.deep_copy()


class ConstraintCompiler:
    """Compiles constraints for one tokenizer, caching the most recent distinct sources."""

    def __init__(self, tokenizer: ConstraintTokenizer, cache_size: int = _CACHE_SIZE) -> None:
        self.tokenizer = tokenizer
        self._cache: OrderedDict[tuple[str, str], CompiledConstraint] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()  # compiled on the asyncio side's executor and on the worker

    def compile(self, spec: ConstraintSpec) -> CompiledConstraint:
        """Compile ``spec`` or raise ConstraintError with the parser's message; nothing is generated first."""
        grammar = to_llguidance(spec)
        key = (spec.kind, grammar)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return CompiledConstraint(spec=spec, grammar=grammar, pristine=hit.pristine)
        # Construction drops the GIL and is bounded by the fuel limits.
        matcher = llguidance.LLMatcher(self.tokenizer.ll, grammar, log_level=0, limits=_limits())
        if matcher.is_error():
            raise ConstraintError(f"{_error_prefix(spec)}{_diagnosis(matcher.get_error())}")
        compiled = CompiledConstraint(spec=spec, grammar=grammar, pristine=matcher)
        with self._lock:
            self._cache[key] = compiled
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return compiled


def _diagnosis(message: str) -> str:
    """The parser's message on one line, without the source excerpt and caret diagram it draws."""
    lines = [line.strip() for line in message.splitlines()]
    kept = [line for line in lines if re.search(r"[A-Za-z]", line) and not _EXCERPT.match(line)]
    return " ".join(kept) or "invalid grammar"


_EXCERPT = re.compile(r"^\d+\s*\|")


def schema_source(schema: object) -> str:
    """A JSON schema value serialized for compilation (an object, or ``true``/``false``).

    An empty schema ``{}`` asks for an object, as b10621's converter reads it (common/json-schema-to-grammar.cpp:
    an empty schema or ``"type": "object"`` is its object rule); llguidance would take any JSON value. It is what
    ``response_format: {"type": "json_object"}`` without a schema means, there and in OpenAI's API.
    """
    if isinstance(schema, dict) and not schema:
        schema = {"type": "object"}
    return json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
