"""llama-server's native ``/completion`` objects: the streamed partials and the final result."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mlxd.engine import FinalEvent, ProgressEvent, Timings, TokenEvent, TokenProb
from mlxd.json_out import SLOT, SLOT2, SLOT3, template
from mlxd.schemas.completion import (
    CompletionChunk,
    CompletionResult,
    NativeOptions,
    TimingsOut,
    TokenProbability,
    TopProb,
    dump,
)


def timings_out(t: Timings) -> TimingsOut:
    """The ``timings`` object of b10621 (per-token and per-second rates derived from the counts)."""
    # b10621 adds the draft counts only when a draft proposed tokens (left unset otherwise, so never rendered).
    drafts = {"draft_n": t.draft_n, "draft_n_accepted": t.draft_n_accepted} if t.draft_n > 0 else {}
    return TimingsOut(
        **drafts,
        cache_n=t.cache_n,
        prompt_n=t.prompt_n,
        prompt_ms=t.prompt_ms,
        prompt_per_token_ms=t.prompt_ms / t.prompt_n if t.prompt_n > 0 else 0.0,
        prompt_per_second=t.prompt_per_second,
        predicted_n=t.predicted_n,
        predicted_ms=t.predicted_ms,
        predicted_per_token_ms=t.predicted_ms / t.predicted_steps if t.predicted_steps > 0 else 0.0,
        predicted_per_second=t.predicted_per_second,
    )


def _bytes(p: TokenProb) -> list[int]:
    return list(p.bytes) if p.bytes else list(p.text.encode("utf-8"))


def _top(p: TokenProb, post_sampling: bool) -> TopProb:
    if post_sampling:
        return TopProb(id=p.id, token=p.text, bytes=_bytes(p), prob=p.prob)
    return TopProb(id=p.id, token=p.text, bytes=_bytes(p), logprob=p.prob)


def token_probability(ev: TokenEvent, post_sampling: bool) -> TokenProbability | None:
    """One generated token with its candidates, as ``completion_probabilities`` and OpenAI ``logprobs`` hold it."""
    if ev.chosen is None and not ev.probs:
        return None
    chosen = ev.chosen or TokenProb(id=ev.token_id, text=ev.text, prob=0.0 if post_sampling else -1e30)
    top = [_top(p, post_sampling) for p in ev.probs or ()]
    base = _top(chosen, post_sampling).model_dump(exclude_unset=True)
    base["token"] = ev.text  # the piece as sent, which may differ from the raw vocabulary entry
    base["bytes"] = list(ev.text.encode("utf-8"))
    if post_sampling:
        return TokenProbability(**base, top_probs=top)
    return TokenProbability(**base, top_logprobs=top)


def probabilities(events: Sequence[TokenEvent], post_sampling: bool) -> list[TokenProbability]:
    out = []
    for ev in events:
        item = token_probability(ev, post_sampling)
        if item is not None:
            out.append(item)
    return out


def native_partial(
    ev: TokenEvent, *, index: int, n_decoded: int, n_prompt: int, opts: NativeOptions, n_probs: int,
    post_sampling: bool, timings: Timings | None = None,
) -> dict[str, Any]:
    """One streamed partial: the new text, its token, and (when asked) timings and probabilities."""
    chunk = CompletionChunk(
        index=index,
        content=ev.text,
        tokens=[ev.token_id] if opts.return_tokens else [],
        stop=False,
        id_slot=-1,
        tokens_predicted=n_decoded,
        tokens_evaluated=n_prompt,
    )
    if timings is not None and opts.timings_per_token:
        chunk.timings = timings_out(timings)
    if n_probs > 0:
        item = token_probability(ev, post_sampling)
        if item is not None:
            chunk.completion_probabilities = [item]
    return dump(chunk)


def partial_template(*, index: int, n_prompt: int, return_tokens: bool) -> Callable[[str, int, list[int]], str]:
    """The JSON of ``native_partial`` without timings or probabilities, as a function of the new text, the tokens
    predicted so far and the token list (json_out.template)."""
    chunk = dump(CompletionChunk(index=index, content=SLOT, tokens=[], stop=False, id_slot=-1, tokens_predicted=0,
                                 tokens_evaluated=n_prompt))
    chunk["tokens_predicted"] = SLOT2
    if return_tokens:
        chunk["tokens"] = SLOT3
        return template(chunk, SLOT, SLOT2, SLOT3)
    render = template(chunk, SLOT, SLOT2)
    return lambda text, n_decoded, tokens: render(text, n_decoded)


def progress_json(ev: ProgressEvent) -> dict[str, int]:
    """b10621's ``prompt_progress`` object."""
    return {"total": ev.total, "cache": ev.cache, "processed": ev.processed, "time_ms": ev.time_ms}


def native_progress(ev: ProgressEvent, *, index: int, n_prompt: int, timings: bool = False) -> dict[str, Any]:
    """A streamed partial that reports prompt processing (``return_progress``): no text, no token; with
    ``timings_per_token`` also the prompt's timings so far."""
    chunk = CompletionChunk(index=index, content="", tokens=[], stop=False, id_slot=-1, tokens_predicted=0,
                            tokens_evaluated=n_prompt, prompt_progress=progress_json(ev))
    if timings:
        chunk.timings = timings_out(Timings(cache_n=ev.cache, prompt_n=ev.processed - ev.cache,
                                            prompt_ms=ev.elapsed_ms if ev.processed > ev.cache else 0.0,
                                            predicted_n=0, predicted_ms=0.0))
    return dump(chunk)


def native_final(
    final: FinalEvent, *, index: int, events: Sequence[TokenEvent], model: str, prompt_text: str,
    settings: dict[str, Any], opts: NativeOptions, n_probs: int, post_sampling: bool,
) -> dict[str, Any]:
    """The final object: everything generated (non-streamed) or only the summary (the last frame of a stream)."""
    n_decoded = len(final.tokens)
    result = CompletionResult(
        index=index,
        content="" if opts.stream else final.text,
        tokens=list(final.tokens) if opts.return_tokens and not opts.stream else [],
        id_slot=final.id_slot,
        stop=True,
        model=model,
        tokens_predicted=n_decoded,
        tokens_evaluated=final.n_prompt_tokens,
        generation_settings=settings,
        prompt=prompt_text,
        has_new_line="\n" in final.text,
        truncated=final.truncated,
        stop_type=final.stop_type,
        stopping_word=final.stopping_word,
        tokens_cached=max(0, final.n_prompt_tokens + n_decoded - 1),
        timings=timings_out(final.timings),
    )
    if not opts.stream and n_probs > 0:
        result.completion_probabilities = probabilities(events, post_sampling)
    out = dump(result)
    return project(out, opts.response_fields) if opts.response_fields else out


def project(obj: dict[str, Any], paths: Sequence[str]) -> dict[str, Any]:
    """``response_fields``: keep only the listed paths; ``a/b`` brings a nested value up under the key ``a/b``."""
    out: dict[str, Any] = {}
    for path in paths:
        current: Any = obj
        for key in path.split("/"):
            if isinstance(current, dict) and key in current:
                current = current[key]
            else:
                break
        else:
            out[path] = current
    return out
