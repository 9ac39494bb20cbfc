"""A streamed chunk rendered from its template is the same text as the chunk rendered whole."""

from __future__ import annotations

import pytest

from mlxd.api.render import openai as oai
from mlxd.api.render.native import native_partial, partial_template
from mlxd.engine.types import TokenEvent
from mlxd.json_out import SLOT, SLOT2, SLOT3, dumps, template
from mlxd.schemas.completion import NativeOptions

TEXTS = ["", " word", "héllo 世界 🎉", 'a "quoted" \\ back\\slash', "line\nbreak\ttab\x01\x1f", "</script>", "\u2028"]
ENV = oai.Envelope('models/"odd" name', "b10621-mlxd", "cmpl-1")


@pytest.mark.parametrize("text", TEXTS)
def test_a_template_writes_what_the_encoder_writes(text: str) -> None:
    payload = {"a": [1, {"b": None, "text": SLOT}], "c": 2.5}
    assert template(payload)(text) == dumps({"a": [1, {"b": None, "text": text}], "c": 2.5})


@pytest.mark.parametrize("text", TEXTS)
def test_streamed_chunks_from_templates_equal_the_chunks_rendered_whole(text: str) -> None:
    assert oai.text_chunk_template(ENV, 1)(text) == dumps(oai.text_chunk(ENV, oai.text_choice(text, 1, None, None)))
    for field in ("content", "reasoning_content"):
        assert oai.chat_delta_template(ENV, 0, field)(text) == dumps(oai.chat_chunk(ENV, 0, {field: text}))


@pytest.mark.parametrize("payload", [{"text": "no slot"}, {"a": SLOT, "b": SLOT}])
def test_a_template_needs_exactly_one_slot(payload: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="exactly once"):
        template(payload)


def test_slots_take_their_values_in_the_order_given() -> None:
    render = template({"b": SLOT2, "a": [SLOT, {"c": SLOT3}]}, SLOT, SLOT2, SLOT3)
    assert render("x\n", 7, [1, 2]) == dumps({"b": 7, "a": ["x\n", {"c": [1, 2]}]})


@pytest.mark.parametrize("return_tokens", [False, True])
@pytest.mark.parametrize("text", TEXTS)
def test_native_partials_from_templates_equal_the_partials_rendered_whole(text: str, return_tokens: bool) -> None:
    opts = NativeOptions(stream=True, return_tokens=return_tokens)
    render = partial_template(index=2, n_prompt=17, return_tokens=return_tokens)
    for n_decoded, token in ((1, 0), (128, 511)):
        event = TokenEvent(n_decoded - 1, token, text)
        whole = native_partial(event, index=2, n_decoded=n_decoded, n_prompt=17, opts=opts, n_probs=0,
                               post_sampling=False, timings=None)
        assert render(text, n_decoded, [token]) == dumps(whole)
