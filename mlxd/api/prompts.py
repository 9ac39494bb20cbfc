"""The ``prompt`` field of the completion routes, tokenized as b10621 tokenizes it.

A prompt is a string, a list of token ids, a mixed list of strings and ids, or a list of those (one generation
per element). A string gets the tokenizer's special tokens (BOS) only when it starts the prompt; ids are used as
they are. An object ``{"prompt_string": ...}`` is its text; with ``multimodal_data`` it needs a vision or audio
model (501 without one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tokenizers import Tokenizer

from mlxd.api import child_tokenizer
from mlxd.errors import InvalidRequest, NotSupported

MISSING_PROMPT = "[json.exception.out_of_range.403] key 'prompt' not found"
MEDIA_NOT_HERE = "multimodal_data is not supported by this endpoint"
OBJECT_PROMPT = ("\"prompt\" elements must be a string, a list of tokens, a JSON object containing a prompt string, "
                 "or a list of mixed strings & tokens.")


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
    # A transformers fast tokenizer's encode is its Rust tokenizer's, but it turns the whole encoding into Python
    # objects holding the GIL (0.4 s for a 10 MB text: every thread, the event loop's included, waits). The Rust
    # tokenizer's own batch call without offsets releases the GIL while it works and hands back the ids alone.
    fast = getattr(tokenizer, "backend_tokenizer", None)
    if isinstance(fast, Tokenizer):
        return child_tokenizer.encode(fast, text, add_special=add_special)
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


def tokenize_prompts(tokenizer: Any, body: Mapping[str, Any], *, required: bool = True,
                     model: Any = None) -> list[list[int]]:
    """Every prompt of a request's ``prompt`` field, tokenized (``model``: the served model, which takes the
    ``multimodal_data`` of object prompts when it has a vision or audio tower)."""
    if "prompt" not in body:
        if required:
            raise InvalidRequest(MISSING_PROMPT)
        return [[]]
    prompt = body["prompt"]
    if _is_single(prompt):
        return [tokenize_one(tokenizer, prompt)]
    if isinstance(prompt, Mapping):
        return [_object_prompt(tokenizer, prompt, model)]
    if isinstance(prompt, list) and prompt:
        out = []
        for item in prompt:
            if isinstance(item, Mapping):
                out.append(_object_prompt(tokenizer, item, model))
                continue
            if not _is_single(item):
                raise InvalidRequest("\"prompt\" must be a string, a list of tokens, a list of mixed strings & "
                                     "tokens, or a list of prompts")
            out.append(tokenize_one(tokenizer, item))
        return out
    raise InvalidRequest("\"prompt\" must be a string, a list of tokens, a list of mixed strings & tokens, "
                         "or a list of prompts")


def _object_prompt(tokenizer: Any, prompt: Mapping[str, Any], model: Any) -> list[int]:
    """``{"prompt_string": ..., "multimodal_data": [base64, ...]}``: its text (or mixed list) as a prompt, as a media
    prompt when it has media (made into the model's tokens by ``api.media_parts.resolve``)."""
    if "prompt_string" not in prompt:
        raise InvalidRequest(OBJECT_PROMPT)
    text = prompt["prompt_string"]
    if not _is_single(text) and not (isinstance(text, list) and all(isinstance(v, str) for v in text) and text):
        raise InvalidRequest("\"prompt_string\" must be a string or a list of mixed strings & tokens")
    tokens = tokenize_one(tokenizer, text)
    if "multimodal_data" not in prompt:
        return tokens
    if model is None:  # a route that does not take media (embeddings, tokenize)
        raise NotSupported(MEDIA_NOT_HERE)
    from mlxd.api.media_parts import completion_prompt

    return completion_prompt(prompt, model, tokens)


def detokenize(tokenizer: Any, tokens: list[int]) -> str:
    """The prompt as text, special tokens included (the final object's ``prompt``)."""
    try:
        return str(tokenizer.decode(tokens, skip_special_tokens=False))
    except TypeError:
        return str(tokenizer.decode(tokens))
