"""The Jinja runtime chat templates render in: transformers' chat-template environment, bent where llama-server's
own runtime (common/jinja) renders what jinja2 would refuse.

Like transformers: sandboxed, ``trim_blocks``/``lstrip_blocks``, ``raise_exception``, a ``tojson`` that does not
HTML-escape, the ``{% generation %}`` tag, loop controls; so a template that renders under
``tokenizer.apply_chat_template`` renders the same text here. Like llama-server: lists are mutable
(``ns.calls.append(...)``), an attribute of an undefined value is undefined, ``+`` treats an undefined or null operand
beside a string as the empty string, ``safe`` adds no markup escaping, and ``tojson`` takes what a filter chain yields
(``map`` gives a generator in Python, a list in llama-server).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import SandboxedEnvironment

from mlxd.engine.chat.errors import ChatTemplateError


class TemplateRaised(jinja2.TemplateError):
    """What ``raise_exception`` throws, so its message reaches the client unprefixed."""


def _raise_exception(message: str) -> None:
    raise TemplateRaised(message)


def _plain(value: Any) -> Any:
    """What JSON can hold: a generator (a filter chain's result) as a list, an undefined value as null."""
    if isinstance(value, jinja2.Undefined):
        return None
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or inspect.isgenerator(value):
        return [_plain(v) for v in value]
    return value


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # transformers replaces Jinja's own tojson, which HTML-escapes '<' and '>' and would corrupt tool schemas.
    return json.dumps(_plain(value), ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


class _GenerationTag(Extension):
    """``{% generation %}...{% endgeneration %}`` marks assistant text for training masks; rendering ignores it."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> list[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class _LenientUndefined(jinja2.ChainableUndefined):
    """An undefined value whose attributes and items are undefined too, as in llama-server's runtime."""


def _is_blank(value: Any) -> bool:
    return value is None or isinstance(value, jinja2.Undefined)


class _Environment(SandboxedEnvironment):
    """A sandbox whose ``+`` joins a string with an undefined or null operand as llama-server's runtime does."""

    intercepted_binops = frozenset(["+"])

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "+" and (
            (_is_blank(left) and isinstance(right, str)) or (_is_blank(right) and isinstance(left, str))
        ):
            return ("" if _is_blank(left) else left) + ("" if _is_blank(right) else right)
        return super().call_binop(context, operator, left, right)


def _environment() -> SandboxedEnvironment:
    # Mutable (not transformers' ImmutableSandboxedEnvironment): Kimi K2's templates append to lists they build.
    # The messages a template sees are deep copies made for each render, so nothing it changes leaks out.
    env = _Environment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_GenerationTag, "jinja2.ext.loopcontrols"],
        undefined=_LenientUndefined,
    )
    env.filters["tojson"] = _tojson
    # llama-server's runtime has no markup strings: `"..."|safe + text` is plain concatenation there, where
    # jinja2's Markup would HTML-escape the text (Functionary v3.1 writes its tool list this way).
    env.filters["safe"] = lambda value: value if isinstance(value, str) else str(value)
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


_ENV = _environment()


def compile_template(source: str, origin: str) -> jinja2.Template:
    try:
        return _ENV.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ChatTemplateError(f"invalid chat template ({origin}), line {exc.lineno}: {exc.message}") from exc
