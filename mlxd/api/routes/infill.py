"""``POST /infill``: fill-in-the-middle with the model's own FIM tokens, answered as a native completion.

The FIM markers come from the vocabulary (``<|fim_prefix|>``/``<fim_prefix>``/``<PRE>`` and their kin); a model
without them is refused with b10621's wording, naming each missing marker.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sanic import Blueprint, HTTPResponse, Request

from mlxd.api import constraints, offload, planning
from mlxd.api import generation as gen
from mlxd.api.body import json_object
from mlxd.api.context import served_model, serving
from mlxd.api.prompts import encode
from mlxd.api.routes.completion import respond_native
from mlxd.errors import InvalidRequest, NotSupported
from mlxd.schemas.fields import read_str

bp = Blueprint("infill")

# The spellings llama.cpp's vocabulary loader recognises for each marker, in its order of preference.
MARKERS: dict[str, tuple[str, ...]] = {
    "prefix": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "▁<PRE>", "<|code_prefix|>"),
    "suffix": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "▁<SUF>", "<|code_suffix|>"),
    "middle": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "▁<MID>", "<|code_middle|>"),
    "repo": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "sep": ("<|file_sep|>", "<|file_separator|>", "<fim-sep>", "<file_sep>"),
}


def fim_tokens(vocab: Mapping[str, int]) -> dict[str, int]:
    """The FIM marker ids a vocabulary has."""
    found: dict[str, int] = {}
    for role, spellings in MARKERS.items():
        for text in spellings:
            if text in vocab:
                found[role] = vocab[text]
                break
    return found


def refusal(fim: Mapping[str, int]) -> str | None:
    """b10621's 501 message for a vocabulary without the three FIM markers, or None when infill can run."""
    missing = "".join(f"{role} token is missing. " for role in ("prefix", "suffix", "middle") if role not in fim)
    return f"Infill is not supported by this model: {missing}" if missing else None


def _extra_chunks(body: Mapping[str, Any]) -> list[tuple[str, str]]:
    extra = body.get("input_extra")
    if extra is None:
        return []
    if not isinstance(extra, list):
        raise InvalidRequest("\"input_extra\" must be an array of {\"filename\": string, \"text\": string}")
    chunks = []
    for chunk in extra:
        if not isinstance(chunk, Mapping) or not isinstance(chunk.get("text"), str):
            raise InvalidRequest("extra_context chunk must contain a \"text\" field with a string value")
        filename = chunk.get("filename", "")
        if not isinstance(filename, str):
            raise InvalidRequest("extra_context chunk's \"filename\" field must be a string")
        chunks.append((filename, chunk["text"]))
    return chunks


def infill_prompt(tokenizer: Any, fim: dict[str, int], body: Mapping[str, Any], *, spm: bool = False) -> list[int]:
    """[repo context] [FIM_PRE] prefix [FIM_SUF] suffix [FIM_MID] prompt, as b10621 lays it out (BOS first);
    ``spm`` (``--spm-infill``) puts the suffix block before the prefix block, as some models prefer."""
    prefix = read_str(body, "input_prefix", None)
    suffix = read_str(body, "input_suffix", None)
    if prefix is None:
        raise InvalidRequest("[json.exception.out_of_range.403] key 'input_prefix' not found")
    if suffix is None:
        raise InvalidRequest("[json.exception.out_of_range.403] key 'input_suffix' not found")
    prompt = read_str(body, "prompt", "") or ""
    tokens: list[int] = []
    chunks = _extra_chunks(body)
    if chunks and "repo" in fim:
        tokens += [fim["repo"]] + encode(tokenizer, "myproject\n", False)
    for filename, text in chunks:
        if "sep" in fim:
            tokens += [fim["sep"]] + encode(tokenizer, filename + "\n", False)
        tokens += encode(tokenizer, text, False)
    if chunks and "sep" in fim:
        tokens += [fim["sep"]] + encode(tokenizer, "filename\n", False)
    bos = getattr(tokenizer, "bos_token_id", None)
    with_bos = encode(tokenizer, "a", True)
    head = [bos] if bos is not None and with_bos and with_bos[0] == bos else []
    prefix_block = [fim["prefix"]] + encode(tokenizer, prefix, False)
    suffix_block = [fim["suffix"]] + encode(tokenizer, suffix, False)
    tokens = head + tokens + (suffix_block + prefix_block if spm else prefix_block + suffix_block)
    tokens += [fim["middle"]] + encode(tokenizer, prompt, False)
    return tokens


@bp.post("/infill")
async def infill(request: Request) -> HTTPResponse | None:
    state = serving(request)
    model = served_model(request)
    tokenizer = model.loaded.tokenizer
    fim = fim_tokens(tokenizer.get_vocab())
    message = refusal(fim)
    if message is not None:
        raise NotSupported(message)
    body = json_object(request)
    spm = bool(planning.config_value(state, "spm_infill", False))
    tokens = await offload.run(infill_prompt, tokenizer, fim, body, spm=spm, size=len(request.body or b""))
    p = await constraints.constrain(planning.plan(body, state, model, [tokens]), body, state, model, chat=False)
    reasoning_format = str(planning.config_value(state, "reasoning_format", "deepseek"))
    settings = planning.generation_settings(p, reasoning_format=reasoning_format)
    jobs = gen.submit(p, model, metrics=state.metrics, route=request.path, progress=True)
    return await respond_native(request, p, model, settings, jobs)
