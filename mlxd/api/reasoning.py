"""Which reasoning budget a request runs with: the worker's ``ReasoningSpec`` from b10621's fields and options.

A native ``/completion`` request names its own tags (``reasoning_budget_start_tag``, ``reasoning_budget_end_tags``);
as llama.cpp builds its budget sampler only with both tags and either a budget or ``reasoning_control``, the fields
do nothing without them. The chat routes take the tags from the template (``<think>`` ... ``</think>`` when it
supports thinking) and fall back to ``--reasoning-budget`` and ``--reasoning-budget-message``, as b10621's chat
parameter parsing does; ``thinking_budget_tokens`` is its alias for ``reasoning_budget_tokens`` there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlxd.api.state import ServingState
from mlxd.engine import ServedModel
from mlxd.engine import ChatPrompt
from mlxd.engine import THINK_CLOSE, THINK_OPEN
from mlxd.engine import ReasoningSpec
from mlxd.schemas.completion import ReasoningFields
from mlxd.schemas.fields import INT32_MAX, read_int


def native_spec(fields: ReasoningFields) -> ReasoningSpec | None:
    """The budget of a native request, or None when its fields build none."""
    if not fields.start_tag or not fields.end_tags:
        return None
    if fields.budget_tokens < 0 and not fields.control:
        return None
    return ReasoningSpec(
        budget=fields.budget_tokens,
        message=fields.message or "",
        # b10621 starts counting at once when the generation prompt it was given ends in the start tag.
        starts_in_reasoning=fields.generation_prompt.rstrip().endswith(fields.start_tag),
        start_tag=fields.start_tag,
        end_tags=fields.end_tags,
        controllable=fields.control,
    )


def chat_spec(body: Mapping[str, Any], fields: ReasoningFields, state: ServingState, model: ServedModel,
              prompt: ChatPrompt) -> ReasoningSpec | None:
    """The budget of a chat request: its own fields over the server's options, for a template that thinks."""
    template = model.chat_template
    if template is None or not template.supports_thinking:
        return None
    budget = fields.budget_tokens
    if budget == -1:
        budget = read_int(body, "thinking_budget_tokens", -1, hard=(-1, INT32_MAX))
    if budget == -1:
        budget = int(state.config.reasoning_budget)
    if budget < 0 and not fields.control:
        return None
    message = fields.message
    if message is None:
        message = state.config.reasoning_budget_message or ""
    return ReasoningSpec(
        budget=budget,
        message=message,
        starts_in_reasoning=prompt.starts_in_reasoning,
        start_tag=THINK_OPEN,
        end_tags=(THINK_CLOSE,),
        controllable=fields.control,
    )
