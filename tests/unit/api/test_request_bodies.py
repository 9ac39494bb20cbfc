"""Request bodies: JSON decoding and pydantic validation always end in ``InvalidRequest`` with a readable line."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, StrictInt

from mlxd.api.body import parse, parse_json
from mlxd.api.errors import translate
from mlxd.errors import ContextOverflow, InvalidRequest


@pytest.mark.parametrize(
    "raw",
    [b"", b"{", b'{"a": 1', b"\xff\xfe", b"[" * 100_000, b'{"a": NaN}', b'{"a": Infinity}',
     b'{"a": "\\ud800"}', b'{"a": ' + b"1" * 10_000 + b"}"],
)
def test_malformed_json_is_an_invalid_request(raw: bytes) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_json(raw)
    assert caught.value.message.startswith("parse error")


def test_valid_json_and_surrogate_pairs_decode() -> None:
    assert parse_json(b'{"a": "\\ud83e\\udd99"}') == {"a": "🦙"}
    assert parse_json(b"[1, 2.5, null, true]") == [1, 2.5, None, True]


class Body(BaseModel):
    tokens: list[StrictInt]
    name: str = ""


def test_validation_names_the_field() -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse(Body, {"tokens": "abc"})
    assert caught.value.message.startswith("Field 'tokens':")
    with pytest.raises(InvalidRequest) as caught:
        parse(Body, {})
    assert caught.value.message == "'tokens' is required"


def test_translation_keeps_extra_keys_and_hides_internals() -> None:
    status, body = translate(ContextOverflow(801, 256))
    assert status == 400
    assert body == {
        "code": 400,
        "message": "request (801 tokens) exceeds the available context size (256 tokens), try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 801,
        "n_ctx": 256,
    }
    status, body = translate(KeyError("secret internals"))
    assert status == 500 and body["message"] == "internal server error" and body["type"] == "server_error"
