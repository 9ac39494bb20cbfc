"""Constrained decoding on llguidance: GBNF grammars, JSON schemas, response formats and forced tool calls.

The worker builds one ``ConstraintTokenizer`` and ``ConstraintCompiler`` per loaded model. A request's
``ConstraintSpec`` (``request_constraint`` for native bodies, ``chat_constraint`` for chat bodies) is
compiled before admission (a ``ConstraintError`` is the 400), then each decode step runs
``apply_masks(logits, matchers)`` before sampling and ``Matcher.consume(token)`` after it; ``consume`` returning
True ends the generation.
"""

from mlxd.engine.constrain.compile import CompiledConstraint, ConstraintCompiler, schema_source
from mlxd.engine.constrain.errors import ConstraintError
from mlxd.engine.constrain.matcher import Matcher, apply_masks, batch_mask
from mlxd.engine.constrain.sources import (
    ServerConstraint,
    chat_constraint,
    request_constraint,
    response_format_schema,
    server_constraint,
)
from mlxd.engine.constrain.spec import ConstraintSpec, Trigger, TriggerType
from mlxd.engine.constrain.tokenizer import ConstraintTokenizer, build_tokenizer
from mlxd.engine.constrain.tools import tool_call_constraint

__all__ = [
    "CompiledConstraint",
    "ConstraintCompiler",
    "ConstraintError",
    "ConstraintSpec",
    "ConstraintTokenizer",
    "Matcher",
    "ServerConstraint",
    "Trigger",
    "TriggerType",
    "apply_masks",
    "batch_mask",
    "build_tokenizer",
    "chat_constraint",
    "request_constraint",
    "response_format_schema",
    "schema_source",
    "server_constraint",
    "tool_call_constraint",
]
