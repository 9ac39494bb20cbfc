"""The ``prompt`` field of the completion routes, tokenized as b10621 tokenizes it.

A prompt is a string, a list of token ids, a mixed list of strings and ids, or a list of those (one generation
per element). A string gets the tokenizer's special tokens (BOS) only when it starts the prompt; ids are used as
they are. An object ``{"prompt_string": ...}`` is its text; with ``multimodal_data`` it needs a vision or audio
model and is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlxd.errors import InvalidRequest, NotSupported

MISSING_PROMPT = "[json.exception.out_of_range.403] key 'prompt' not found"
NO_MULTIMODAL = "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj"


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_single(value: Any) -> bool:
    """A string, or a list of ids and strings with at least one id (b10621's "mixed" prompt)."""
    if isinstance(value, str):
        return True
    return (isinstance(value, list) and bool(value) and all(_is_token(v) or isinstance(v, str) for v in value)
            and any(_is_token(v) for v in value))


def encode(tokenizer: Any, text: str, add_special: bool) -> list[int]:
    """Tokenize text, parsing special-token text; ``add_special`` adds what the tokenizer adds (BOS)."""
    return list(tokenizer.encode(text, add_special_tokens=add_special))


def vocab_size(tokenizer: Any) -> int:
    try:
        return len(tokenizer)
    except TypeError:
        return int(tokenizer.vocab_size)


def tokenize_one(tokenizer: Any, prompt: Any) -> list[int]:
    """One prompt: a string, or a mixed list whose first string (only) gets special tokens."""
    if isinstance(prompt, str):
        return encode(tokenizer, prompt, True)
    out: list[int] = []
    n_vocab = vocab_size(tokenizer)
    for i, piece in enumerate(prompt):
        if isinstance(piece, str):
            out += encode(tokenizer, piece, i == 0)
        else:
            if not 0 <= piece < n_vocab:
                raise InvalidRequest(f"invalid token id {piece} at position {i}: the vocabulary has {n_vocab} tokens")
            out.append(piece)
    return out


def tokenize_prompts(tokenizer: Any, body: Mapping[str, Any], *, required: bool = True) -> list[list[int]]:
    """Every prompt of a request's ``prompt`` field, tokenized."""
    if "prompt" not in body:
        if required:
            raise InvalidRequest(MISSING_PROMPT)
        return [[]]
    prompt = body["prompt"]
    if _is_single(prompt):
        return [tokenize_one(tokenizer, prompt)]
    if isinstance(prompt, Mapping):
        return [_object_prompt(tokenizer, prompt)]
    if isinstance(prompt, list) and prompt:
        out = []
        for item in prompt:
            if isinstance(item, Mapping):
                out.append(_object_prompt(tokenizer, item))
                continue
            if not _is_single(item):
                raise InvalidRequest("\"prompt\" must be a string, a list of tokens, a list of mixed strings & "
                                     "tokens, or a list of prompts")
            out.append(tokenize_one(tokenizer, item))
        return out
    raise InvalidRequest("\"prompt\" must be a string, a list of tokens, a list of mixed strings & tokens, "
                         "or a list of prompts")


def _object_prompt(tokenizer: Any, prompt: Mapping[str, Any]) -> list[int]:
    """``{"prompt_string": ...}``: its text (or mixed list) as a prompt; with ``multimodal_data`` it needs media."""
    if "prompt_string" not in prompt:
        raise InvalidRequest("\"prompt\" elements must be a string, a list of tokens, a JSON object containing a "
                             "prompt string, or a list of mixed strings & tokens.")
    if "multimodal_data" in prompt:
        raise NotSupported(NO_MULTIMODAL)
    text = prompt["prompt_string"]
    if not _is_single(text) and not (isinstance(text, list) and all(isinstance(v, str) for v in text) and text):
        raise InvalidRequest("\"prompt_string\" must be a string or a list of mixed strings & tokens")
    return tokenize_one(tokenizer, text)


def detokenize(tokenizer: Any, tokens: list[int]) -> str:
    """The prompt as text, special tokens included (the final object's ``prompt``)."""
    try:
        return str(tokenizer.decode(tokens, skip_special_tokens=False))
    except TypeError:
        return str(tokenizer.decode(tokens))
