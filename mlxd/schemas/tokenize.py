"""``/tokenize``, ``/detokenize`` and ``/apply-template`` bodies."""

from __future__ import annotations

from typing import Union

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr

TokenizeContent = Union[StrictStr, list[Union[StrictStr, StrictInt]]]


class TokenizeRequest(BaseModel):
    """A missing ``content`` tokenizes nothing (``{"tokens": []}``), as b10621 answers."""

    model_config = ConfigDict(extra="allow")

    content: TokenizeContent | None = None
    add_special: StrictBool = False
    parse_special: StrictBool = True
    with_pieces: StrictBool = False


class TokenPiece(BaseModel):
    """One token with its text, or its bytes when they are not valid UTF-8 on their own."""

    id: int
    piece: str | list[int]


class TokenizeResponse(BaseModel):
    tokens: list[int] | list[TokenPiece]


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    tokens: list[StrictInt] = []


class DetokenizeResponse(BaseModel):
    content: str


class ApplyTemplateResponse(BaseModel):
    prompt: str
